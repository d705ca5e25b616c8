"""Hold-out check of the whole path with logs of our own: a seeded generator samples from known rollout and trainer
distributions, writes what vLLM's chat server would log for them (the sampled token listed first in each position's
top-K dict, cut to k entries; streamed, ``n = 2``, multi-turn context growth and an error answer mixed in), then
import → join → audit. Every trained token must come out verifiable, no certificate position invalid (vLLM's lists
as logged are unsorted wherever the sample is not the argmax: the certificate refuses those), and every certified
interval must contain the true TV of the two known distributions."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import orjson

from workers.fidelity import audit_file
from workers.fidelity.importers import import_vllm
from workers.fidelity.join import join

from .helpers import dumps

V, K = 40, 4


def tid(i):
    return f"token_id:{i}"


def vllm_entry(s, logp):
    """vLLM: the step's dict is {sampled, top-1, …, top-k} (first insertion wins); chat keeps its first k items."""
    order = [s] + [int(i) for i in np.argsort(-logp, kind="stable")[:K]]
    seen, items = set(), []
    for i in order:
        if i not in seen:
            seen.add(i)
            items.append(i)
    return {
        "token": tid(s),
        "logprob": float(logp[s]),
        "bytes": [],
        "top_logprobs": [{"token": tid(i), "logprob": float(logp[i]), "bytes": []} for i in items[:K]],
    }


def build(rng, n_calls=30):
    exchanges, truth, trainer_rows = [], {}, []
    for c in range(n_calls):
        traj = f"t{c // 3}"
        index = c % 3
        n_choices = 2 if c % 7 == 3 else 1
        if index == 0:  # a new trajectory; later calls extend its context (TITO), as an agent loop does
            ctx = [int(x) for x in rng.integers(0, V, 6)]
        prompt = list(ctx)
        choices = []
        for j in range(n_choices):
            T = int(rng.integers(2, 9))
            ids, content, pq = [], [], []
            for _ in range(T):
                p = rng.dirichlet(np.full(V, 0.3))
                q = 0.85 * p + 0.15 * rng.dirichlet(np.full(V, 0.3))
                s = int(rng.choice(V, p=p))
                ids.append(s)
                content.append(vllm_entry(s, np.log(p)))
                pq.append((p, q))
            choices.append(
                {
                    "index": j,
                    "message": {"role": "assistant", "content": "x"},
                    "token_ids": ids,
                    "logprobs": {"content": content},
                    "finish_reason": "stop",
                }
            )
            cid = f"cmpl-{c}" if n_choices == 1 else f"cmpl-{c}#{j}"
            truth[cid] = pq
            trainer_rows.append(
                {
                    "call_id": cid,
                    "logprobs": [float(np.log(q[s])) for (p, q), s in zip(pq, ids)],
                    "loss_mask_used": [1] * T,
                    "sample_id": cid,
                    "task_prompt_sha256_declared": hashlib.sha256(f"task {c // 3}".encode()).hexdigest(),
                    # the trainer's values on the rollout's listed ids (fcr/1 coverage) and its own top-2
                    "top_k": [
                        [
                            [int(i), float(np.log(q[i]))]
                            for i in sorted(
                                {int(t["token"][9:]) for t in e["top_logprobs"]} | {int(i) for i in np.argsort(-q)[:2]}
                            )
                        ]
                        for e, (p, q) in zip(content, pq)
                    ],
                }
            )
        ctx = prompt + choices[0]["token_ids"] + [int(x) for x in rng.integers(0, V, 3)]  # + a tool result
        resp = {
            "id": f"cmpl-{c}",
            "object": "chat.completion",
            "model": "m",
            "prompt_token_ids": prompt,
            "choices": choices,
        }
        history = [{"role": "user", "content": f"task {c // 3}"}] + [
            {"role": "assistant", "content": "x"},
            {"role": "tool", "content": "y"},
        ] * index
        req = {
            "model": "m",
            "messages": history,
            "logprobs": True,
            "top_logprobs": K,
            "return_token_ids": True,
            "temperature": 1.0,
            "top_p": 1.0,
        }
        if c % 5 == 1:  # streamed: one chunk per token
            chunks = [
                {
                    "id": f"cmpl-{c}",
                    "object": "chat.completion.chunk",
                    "model": "m",
                    "prompt_token_ids": prompt,
                    "choices": [
                        {"index": ch["index"], "delta": {"role": "assistant", "content": ""}} for ch in choices
                    ],
                }
            ]
            for ch in choices:
                for t, e in zip(ch["token_ids"], ch["logprobs"]["content"]):
                    chunks.append(
                        {
                            "id": f"cmpl-{c}",
                            "object": "chat.completion.chunk",
                            "model": "m",
                            "choices": [
                                {
                                    "index": ch["index"],
                                    "delta": {"content": "x"},
                                    "token_ids": [t],
                                    "logprobs": {"content": [e]},
                                    "finish_reason": None,
                                }
                            ],
                        }
                    )
            resp = chunks
            req["stream"] = True
        exchanges.append(
            {
                "request": req,
                "response": resp,
                "meta": {
                    "trajectory_id": traj,
                    "call_index": index,
                    "step": 1,
                    "call_id": f"cmpl-{c}",
                    "headers": {"X-FCR-Call-Role": "policy"},
                },
            }
        )
    # an error answer to a declared policy call: kept as a (missing) policy record, not an undeclared one
    exchanges.append(
        {
            "request": {"model": "m", "messages": [{"role": "user", "content": "late"}]},
            "response": {"error": {"message": "overloaded", "type": "ServiceUnavailableError", "code": 503}},
            "meta": {
                "trajectory_id": "t-err",
                "call_index": 0,
                "step": 1,
                "call_id": "err-0",
                "headers": {"X-FCR-Call-Role": "policy"},
            },
        }
    )
    return exchanges, truth, trainer_rows


def test_holdout_vllm_import_join_audit(tmp_path):
    rng = np.random.default_rng(20261203)
    exchanges, truth, trainer_rows = build(rng)
    src, inf, tr, out = (tmp_path / n for n in ("ex.jsonl", "inf.jsonl", "tr.jsonl", "joined.jsonl"))
    src.write_bytes(dumps(exchanges))
    tr.write_bytes(dumps(trainer_rows))
    logged = [
        e
        for ex in exchanges
        if isinstance(ex["response"], dict) and "choices" in ex["response"]
        for ch in ex["response"]["choices"]
        for e in ch["logprobs"]["content"]
    ]
    unsorted = sum(
        1
        for e in logged
        if [t["logprob"] for t in e["top_logprobs"]] != sorted((t["logprob"] for t in e["top_logprobs"]), reverse=True)
    )
    outside = sum(1 for e in logged if e["logprob"] < min(t["logprob"] for t in e["top_logprobs"][1:]))
    assert unsorted > 10 and outside > 3  # the fixture exercises both vLLM list shapes
    stats = import_vllm(
        src,
        inf,
        logprobs_mode="processed_logprobs",
        generation_config_source="request_only",
        chat_template_sha256="c" * 64,
    )
    assert stats["failed"] == 1 and stats["records"] == len(truth) + 1
    before = audit_file(inf)
    assert before["verdict_label"] == "PASS — nothing verifiable"
    join(inf, tr, out, allow_untrained=True)  # the error record was never trained on
    rep = audit_file(out)
    n_tokens = sum(len(v) for v in truth.values())
    cov = rep["coverage"]
    assert cov["policy_tokens"] == n_tokens  # the error record has no tokens
    assert rep["closed_failure_violations"] == 0 and cov["calls"]["spurious_call_rate"] == 0
    assert rep["headline"] == f"100% of policy tokens verifiable ({n_tokens:,} of {n_tokens:,})", [
        (c["call_id"], c["reasons"]) for c in rep["calls"] if c["reasons"]
    ]
    assert rep["coverage"]["certificates"]["decisions"]["invalid"] == 0
    checked = 0
    for call in rep["calls"]:
        cert = call.get("certificate")
        if not cert or call["call_id"] not in truth:
            continue
        for t, (p, q) in enumerate(truth[call["call_id"]]):
            tv = 0.5 * float(np.abs(p - q).sum())
            lo, hi = cert["lo"][t], cert["hi"][t]
            assert lo - 1e-9 <= tv <= hi + 1e-9, (call["call_id"], t, lo, tv, hi)
            checked += 1
    assert checked == n_tokens and math.isfinite(checked)


def random_trajectory(rng):
    """A multi-turn agent trajectory: model turns (mask 1) and tool outputs (mask 0) of random lengths."""
    prompt = [int(x) for x in rng.integers(0, V, int(rng.integers(3, 8)))]
    resp, mask, lps = [], [], []
    for turn in range(int(rng.integers(1, 5))):
        if turn:
            k = int(rng.integers(0, 4))  # a tool output may be empty: two model turns then merge into one run
            resp += [int(x) for x in rng.integers(0, V, k)]
            mask += [0] * k
            lps += [0.0] * k
        k = int(rng.integers(1, 6))
        resp += [int(x) for x in rng.integers(0, V, k)]
        mask += [1] * k
        lps += [float(-x) for x in rng.uniform(0.01, 3.0, k)]
    return prompt, resp, mask, lps


def test_holdout_trajectory_importers_partition_the_model_tokens(tmp_path):
    """verl / slime / SkyRL on seeded random trajectories: every mask-1 token is the response token of exactly one
    call, no mask-0 token ever is, each call's prompt is the trajectory so far (so lineage holds), and after a join
    with the trainer's values every token is verifiable."""
    rng = np.random.default_rng(7)
    trajs = [random_trajectory(rng) for _ in range(40)]
    msgs = [{"role": "user", "content": "solve it"}]
    task = hashlib.sha256(b"solve it").hexdigest()
    lines = {
        "verl": [
            {
                "prompt_ids": p,
                "response_ids": r,
                "response_mask": m,
                "response_logprobs": lp,
                "metrics": {},
                "extra_fields": {},
                "trajectory_id": f"v{i}",
                "raw_prompt": msgs,
                "step": 2,
            }
            for i, (p, r, m, lp) in enumerate(trajs)
        ],
        "slime": [
            {
                "group_index": 0,
                "index": i,
                "prompt": msgs,
                "tokens": p + r,
                "response_length": len(r),
                "loss_mask": m,
                "rollout_log_probs": lp,
                "weight_versions": ["2"],
                "status": "completed",
            }
            for i, (p, r, m, lp) in enumerate(trajs)
        ],
        "skyrl": [
            {
                "prompt_token_ids": [t[0] for t in trajs],
                "response_ids": [t[1] for t in trajs],
                "loss_masks": [t[2] for t in trajs],
                "rollout_logprobs": [t[3] for t in trajs],
                "rewards": [0.0] * len(trajs),
                "stop_reasons": None,
                "trajectory_ids": [{"instance_id": "x", "repetition_id": i} for i in range(len(trajs))],
                "prompts": [msgs] * len(trajs),
            }
        ],
    }
    from workers.fidelity.importers.trajectories import import_trajectories

    for fmt, rows in lines.items():
        src, inf = tmp_path / f"{fmt}.in.jsonl", tmp_path / f"{fmt}.jsonl"
        src.write_bytes(dumps(rows))
        import_trajectories(
            src,
            inf,
            fmt=fmt,
            engine="vllm",
            logprobs_mode="processed_logprobs",
            generation_config_source="request_only",
        )
        recs = [orjson.loads(x) for x in inf.read_bytes().splitlines()]
        by_traj: dict = {}
        for r in recs:
            by_traj.setdefault(r["trajectory_id"], []).append(r)
        assert len(by_traj) == len(trajs), fmt
        for (p, resp, mask, lps), calls in zip(trajs, by_traj.values()):
            calls.sort(key=lambda r: r["call_index"])
            got = [t for c in calls for t in c["response"]["token_ids"]]
            assert got == [t for t, m in zip(resp, mask) if m], fmt  # exactly the model tokens, in order
            for c in calls:
                a, b = c["extra"]["response_span"]
                assert all(mask[a:b]) and (a == 0 or not mask[a - 1]) and (b == len(mask) or not mask[b])
                assert c["prompt"]["token_ids"] == p + resp[:a]  # the trajectory so far
                assert c["rollout"]["logprobs"] == lps[a:b]
        rows_tr = [
            {
                "call_id": r["call_id"],
                "logprobs": [v - 0.05 for v in r["rollout"]["logprobs"]],
                "loss_mask_used": [1] * len(r["response"]["token_ids"]),
                "sample_id": r["trajectory_id"],
                "task_prompt_sha256_declared": task,
            }
            for r in recs
        ]
        (tmp_path / f"{fmt}.tr.jsonl").write_bytes(dumps(rows_tr))
        join(inf, tmp_path / f"{fmt}.tr.jsonl", tmp_path / f"{fmt}.joined.jsonl")
        rep = audit_file(tmp_path / f"{fmt}.joined.jsonl", mode="merged")
        n = sum(sum(m) for _, _, m, _ in trajs)
        assert rep["headline"] == f"100% of policy tokens verifiable ({n:,} of {n:,})", (
            fmt,
            [(c["call_id"], c["reasons"]) for c in rep["calls"] if c["reasons"]][:3],
        )
