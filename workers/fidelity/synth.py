"""Synthetic ``fcr/1`` records for tests and benchmarks (docs/fcr.md#record-fields, the toy
conventions of docs/fcr.md#toy-tokenizer).

Deterministic given the seed; records are well-formed and, unless told otherwise, fully verifiable.
"""

from __future__ import annotations

import math
import random

import orjson

from workers.fcr.schema import ids_sha256

TOY_TOKENIZER_SHA = "100487659ed21cf0c9ec3649a3e2d3ed74759bbb416eff4dab4f6c72a31accd8"
TOY_TEMPLATE_SHA = "64caafe4aacf4c1466fa74060730180df25fd866303ee54059c14967ed5f6b68"


def base_record(**over) -> dict:
    """The shared fields of the examples in docs/fcr.md#toy-tokenizer (run-toy, step 7, toy tokenizer/template,
    processed logprobs)."""
    rec = {
        "schema": "fcr/1",
        "run_id": "run-toy",
        "trajectory_id": "t0",
        "step": 7,
        "call_id": "t0-0",
        "call_index": 0,
        "role": "policy",
        "role_source": "header",
        "purpose": "main_loop",
        "model": {"served_name": "toy-policy", "policy_version": 7},
        "tokenizer": {"id": "toy", "sha256": TOY_TOKENIZER_SHA},
        "chat_template": {"sha256": TOY_TEMPLATE_SHA},
        "engine": {
            "name": "vllm",
            "api": "chat.completions",
            "logprobs_mode": "processed_logprobs",
            "generation_config_source": "request_only",
        },
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1},
        "source": {"format": "vllm_openai_chat", "ref": "synthetic"},
    }
    rec.update(over)
    return rec


def synth_record(
    rng: random.Random,
    *,
    call: int,
    traj: str,
    prompt_len=256,
    resp_len=256,
    k=5,
    vocab=32000,
    trainer=True,
    run_id="run-synth",
    step=0,
) -> dict:
    prompt = [rng.randrange(vocab) for _ in range(prompt_len)]
    resp = [rng.randrange(vocab) for _ in range(resp_len)]
    lps = [round(math.log(rng.uniform(0.05, 1.0)), 6) for _ in resp]
    rec = base_record(
        run_id=run_id,
        trajectory_id=traj,
        step=step,
        call_id=f"{traj}-{call}",
        call_index=call,
        prompt={
            "token_ids": prompt,
            "provenance": "engine",
            "ids_sha256": ids_sha256(prompt),
            "task_prompt_sha256_declared": None,
            "task_prompt_sha256_observed": None,
        },
        response={
            "token_ids": resp,
            "provenance": "engine",
            "ids_sha256": ids_sha256(resp),
            "text": None,
            "usage_completion_tokens": resp_len,
            "finish_reason": "stop",
        },
    )
    ro = {"logprobs": lps}
    if k:
        ro["top_k"] = [
            [[a, lp]] + [[rng.randrange(vocab), round(lp - 1.0 - j, 6)] for j in range(k - 1)]
            for a, lp in zip(resp, lps)
        ]
    rec["rollout"] = ro
    if trainer:
        tl = [round(x - 0.01, 6) for x in lps]
        tr = {"policy_version": step, "logprobs": tl, "loss_mask_used": [1] * resp_len, "sample_id": rec["call_id"]}
        if k:
            tr["top_k"] = [[[e[0], round(e[1] - 0.01, 6)] for e in pos] for pos in ro["top_k"]]
        rec["trainer"] = tr
    return rec


def write_synth(path, n_records: int, *, seed=0, calls_per_traj=4, **kw) -> int:
    """Write ``n_records`` synthetic records; returns bytes written."""
    rng = random.Random(seed)
    total = 0
    with open(path, "wb") as fh:
        for i in range(n_records):
            t, c = divmod(i, calls_per_traj)
            b = orjson.dumps(synth_record(rng, call=c, traj=f"t{t}", step=t // 8, **kw)) + b"\n"
            fh.write(b)
            total += len(b)
    return total
