"""Realistic synthetic ``fcr/1`` run logs, for the demo project, tests and benchmarks.

A run has trajectories of agent calls: policy calls (engine ids, rollout log-probs and top-K, trainer
recomputed log-probs and top-K on the same ids, the loss mask used) and the occasional background call
(a title or compaction request that reached the policy server). The trainer's distribution differs from the
rollout's the way real stacks differ: small log-space noise everywhere (bf16-like numerics) plus rare large
"routing flips" where the trainer moves a lot of mass. No network, no model: numpy draws only.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from workers.fcr.schema import ids_sha256 as sha256_ids

VOCAB = 32000
EOS = 3
SYSTEM_PROMPT = [0, 40, 41, 42, 43, 46, 3]
TASKS = ["List files", "Say it", "Fix the failing test", "Summarise the log", "Rename the module"]


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class SynthConfig:
    trajectories: int = 64
    calls_per_trajectory: tuple[int, int] = (1, 4)
    response_len: tuple[int, int] = (16, 192)
    top_k: int = 5
    candidates: int = 12  # ids per position that carry most of the mass
    noise: float = 0.02  # log-space trainer noise (bf16-like)
    spike_rate: float = 0.002  # per-token rate of a large trainer/rollout disagreement
    background_rate: float = 0.1  # share of trajectories with a background call
    steps: int = 8
    run_id: str = "demo-run"
    seed: int = 0


def _position_distributions(rng: np.random.Generator, n: int, cfg: SynthConfig):
    """Rollout and trainer log-probs over ``candidates`` ids per position, plus the unlisted tail."""
    c = cfg.candidates
    ids = (
        np.stack([rng.choice(VOCAB - 100, size=c, replace=False) + 100 for _ in range(n)])
        if n
        else np.zeros((0, c), int)
    )
    sharp = rng.uniform(2.5, 6.0, size=(n, 1))  # LLM next-token distributions are peaked
    logits = rng.standard_normal((n, c)) * sharp
    tail = rng.uniform(0.0005, 0.01, size=(n, 1))  # mass on ids outside the candidates
    p = np.exp(logits - logits.max(1, keepdims=True))
    p = p / p.sum(1, keepdims=True) * (1 - tail)
    q_logits = np.log(p) + rng.standard_normal((n, c)) * cfg.noise
    spikes = rng.random(n) < cfg.spike_rate
    if spikes.any():  # a routing flip: the trainer moves the top token's mass elsewhere
        top = p[spikes].argmax(1)
        q_logits[spikes, top] -= rng.uniform(2.0, 6.0, size=spikes.sum())
    q = np.exp(q_logits)
    q_tail = tail[:, 0] * np.exp(rng.standard_normal(n) * cfg.noise)
    q = q / q.sum(1, keepdims=True) * (1 - q_tail[:, None])
    return ids, p, q


def _policy_call(rng, cfg: SynthConfig, traj: str, index: int, step: int, prompt: list[int], task: str, root: bool):
    length = int(rng.integers(cfg.response_len[0], cfg.response_len[1] + 1))
    ids, p, q = _position_distributions(rng, length, cfg)
    cum = p.cumsum(1)
    u = rng.random((length, 1)) * cum[:, -1:]
    choice = np.minimum((u > cum).sum(1), cfg.candidates - 1)
    rows = np.arange(length)
    sampled = ids[rows, choice]
    sampled[-1] = EOS
    ids[-1, choice[-1]] = EOS
    lp_roll = np.log(p[rows, choice])
    lp_train = np.log(q[rows, choice])
    k = cfg.top_k
    order_p = np.argsort(-p, axis=1)[:, :k]
    roll_topk, train_topk = [], []
    for t in range(length):  # small per-position lists; building JSON is the cost anyway
        op = order_p[t]
        roll_topk.append([[int(ids[t, j]), round(float(np.log(p[t, j])), 6)] for j in op])
        oq = op[np.argsort(-q[t, op])]
        train_topk.append([[int(ids[t, j]), round(float(np.log(q[t, j])), 6)] for j in oq])
    response = [int(x) for x in sampled]
    digest = sha256_text(task)
    return {
        "schema": "fcr/1",
        "run_id": cfg.run_id,
        "trajectory_id": traj,
        "step": step,
        "call_id": f"{traj}-{index}",
        "call_index": index,
        "parent_call_id": None,
        "role": "policy",
        "role_source": "header",
        "purpose": "main_loop",
        "model": {"served_name": "policy", "policy_version": step},
        "tokenizer": {"id": "synthetic@1", "sha256": "0" * 64},
        "chat_template": {"sha256": "1" * 64},
        "engine": {
            "name": "vllm",
            "api": "chat.completions",
            "logprobs_mode": "processed_logprobs",
            "generation_config_source": "request_only",
        },
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": cfg.response_len[1]},
        "prompt": {
            "token_ids": prompt,
            "provenance": "engine",
            "ids_sha256": sha256_ids(prompt),
            "task_prompt_sha256_declared": digest if root else None,
            "task_prompt_sha256_observed": digest if root else None,
        },
        "response": {
            "token_ids": response,
            "provenance": "engine",
            "ids_sha256": sha256_ids(response),
            "text": None,
            "usage_completion_tokens": length,
            "finish_reason": "stop",
        },
        "rollout": {"logprobs": [round(float(x), 6) for x in lp_roll], "top_k": roll_topk},
        "trainer": {
            "policy_version": step,
            "logprobs": [round(float(x), 6) for x in lp_train],
            "top_k": train_topk,
            "loss_mask_used": [1] * length,
            "sample_id": f"{traj}-{index}",
        },
        "source": {"format": "synthetic", "ref": f"synth:{traj}:{index}", "importer_version": "1"},
    }


def _background_call(rng, cfg: SynthConfig, traj: str, index: int, step: int, task_ids: list[int]):
    response = [35, EOS]
    prompt = [0, 33, 34, 3] + task_ids
    return {
        "schema": "fcr/1",
        "run_id": cfg.run_id,
        "trajectory_id": traj,
        "step": step,
        "call_id": f"{traj}-bg-{index}",
        "call_index": index,
        "role": "background",
        "role_source": "header",
        "purpose": "title",
        "model": {"served_name": "policy", "policy_version": step},
        "tokenizer": {"id": "synthetic@1", "sha256": "0" * 64},
        "chat_template": {"sha256": "1" * 64},
        "engine": {
            "name": "vllm",
            "api": "chat.completions",
            "logprobs_mode": "processed_logprobs",
            "generation_config_source": "request_only",
        },
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 32},
        "prompt": {
            "token_ids": prompt,
            "provenance": "engine",
            "ids_sha256": sha256_ids(prompt),
            "task_prompt_sha256_declared": None,
            "task_prompt_sha256_observed": None,
        },
        "response": {
            "token_ids": response,
            "provenance": "engine",
            "ids_sha256": sha256_ids(response),
            "usage_completion_tokens": 2,
        },
        "rollout": {"logprobs": [round(float(-rng.uniform(0.1, 2.0)), 6), -0.05]},
        "source": {"format": "synthetic", "ref": f"synth:{traj}:bg{index}", "importer_version": "1"},
    }


def iter_run(cfg: SynthConfig):
    """Yield the run's records (dicts) in order."""
    rng = np.random.default_rng(cfg.seed)
    for n in range(cfg.trajectories):
        traj = f"{cfg.run_id}-s{cfg.seed}-t{n:05d}"
        step = n * cfg.steps // max(cfg.trajectories, 1)
        task = TASKS[n % len(TASKS)]
        task_ids = [1] + [int(x) for x in rng.integers(100, VOCAB, size=int(rng.integers(4, 24)))] + [3]
        prompt = SYSTEM_PROMPT + task_ids + [2]
        calls = int(rng.integers(cfg.calls_per_trajectory[0], cfg.calls_per_trajectory[1] + 1))
        index = 0
        for c in range(calls):
            record = _policy_call(rng, cfg, traj, index, step, list(prompt), task, root=(c == 0))
            yield record
            index += 1
            observation = [1] + [int(x) for x in rng.integers(100, VOCAB, size=int(rng.integers(3, 12)))] + [3, 2]
            prompt = prompt + record["response"]["token_ids"] + observation
        if rng.random() < cfg.background_rate:
            yield _background_call(rng, cfg, traj, index, step, task_ids)


def write_run(
    path, cfg: SynthConfig | None = None, *, compress: bool | None = None, target_bytes: int | None = None
) -> dict:
    """Write a run log to ``path`` (gzip when the name ends in .gz unless ``compress`` says otherwise).

    With ``target_bytes`` the generator keeps adding trajectories (new seeds) until the uncompressed
    output reaches that size — for ingest benchmarks on large files.
    """
    cfg = cfg or SynthConfig()
    path = Path(path)
    compress = path.suffix == ".gz" if compress is None else compress
    opener = (lambda: gzip.open(path, "wb", compresslevel=1)) if compress else (lambda: open(path, "wb"))
    records = tokens = written = 0
    seed = cfg.seed
    with opener() as fh:
        while True:
            batch_cfg = SynthConfig(**{**cfg.__dict__, "seed": seed})
            for record in iter_run(batch_cfg):
                line = orjson.dumps(record) + b"\n"
                fh.write(line)
                written += len(line)
                records += 1
                tokens += len(record["response"]["token_ids"])
            seed += 1
            if target_bytes is None or written >= target_bytes:
                break
    return {"path": str(path), "records": records, "tokens": tokens, "uncompressed_bytes": written}
