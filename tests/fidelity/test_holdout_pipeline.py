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
    return {"token": tid(s), "logprob": float(logp[s]), "bytes": [],
            "top_logprobs": [{"token": tid(i), "logprob": float(logp[i]), "bytes": []} for i in items[:K]]}


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
            choices.append({"index": j, "message": {"role": "assistant", "content": "x"}, "token_ids": ids,
                            "logprobs": {"content": content}, "finish_reason": "stop"})
            cid = f"cmpl-{c}" if n_choices == 1 else f"cmpl-{c}#{j}"
            truth[cid] = pq
            trainer_rows.append({"call_id": cid, "logprobs": [float(np.log(q[s])) for (p, q), s in zip(pq, ids)],
                                 "loss_mask_used": [1] * T, "sample_id": cid,
                                 "task_prompt_sha256_declared": hashlib.sha256(f"task {c // 3}".encode()).hexdigest(),
                                 # the trainer's values on the rollout's listed ids (fcr/1 coverage) and its own top-2
                                 "top_k": [[[int(i), float(np.log(q[i]))] for i in sorted(
                                     {int(t["token"][9:]) for t in e["top_logprobs"]}
                                     | {int(i) for i in np.argsort(-q)[:2]})] for e, (p, q) in zip(content, pq)]})
        ctx = prompt + choices[0]["token_ids"] + [int(x) for x in rng.integers(0, V, 3)]  # + a tool result
        resp = {"id": f"cmpl-{c}", "object": "chat.completion", "model": "m", "prompt_token_ids": prompt,
                "choices": choices}
        history = [{"role": "user", "content": f"task {c // 3}"}] + [
            {"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}] * index
        req = {"model": "m", "messages": history, "logprobs": True,
               "top_logprobs": K, "return_token_ids": True, "temperature": 1.0, "top_p": 1.0}
        if c % 5 == 1:  # streamed: one chunk per token
            chunks = [{"id": f"cmpl-{c}", "object": "chat.completion.chunk", "model": "m", "prompt_token_ids": prompt,
                       "choices": [{"index": ch["index"], "delta": {"role": "assistant", "content": ""}}
                                   for ch in choices]}]
            for ch in choices:
                for t, e in zip(ch["token_ids"], ch["logprobs"]["content"]):
                    chunks.append({"id": f"cmpl-{c}", "object": "chat.completion.chunk", "model": "m",
                                   "choices": [{"index": ch["index"], "delta": {"content": "x"}, "token_ids": [t],
                                                "logprobs": {"content": [e]}, "finish_reason": None}]})
            resp = chunks
            req["stream"] = True
        exchanges.append({"request": req, "response": resp,
                          "meta": {"trajectory_id": traj, "call_index": index, "step": 1, "call_id": f"cmpl-{c}",
                                   "headers": {"X-FCR-Call-Role": "policy"}}})
    # an error answer to a declared policy call: kept as a (missing) policy record, not an undeclared one
    exchanges.append({"request": {"model": "m", "messages": [{"role": "user", "content": "late"}]},
                      "response": {"error": {"message": "overloaded", "type": "ServiceUnavailableError",
                                             "code": 503}},
                      "meta": {"trajectory_id": "t-err", "call_index": 0, "step": 1, "call_id": "err-0",
                               "headers": {"X-FCR-Call-Role": "policy"}}})
    return exchanges, truth, trainer_rows


def test_holdout_vllm_import_join_audit(tmp_path):
    rng = np.random.default_rng(20261203)
    exchanges, truth, trainer_rows = build(rng)
    src, inf, tr, out = (tmp_path / n for n in ("ex.jsonl", "inf.jsonl", "tr.jsonl", "joined.jsonl"))
    src.write_bytes(dumps(exchanges))
    tr.write_bytes(dumps(trainer_rows))
    logged = [e for ex in exchanges if isinstance(ex["response"], dict) and "choices" in ex["response"]
              for ch in ex["response"]["choices"] for e in ch["logprobs"]["content"]]
    unsorted = sum(1 for e in logged if [t["logprob"] for t in e["top_logprobs"]] != sorted(
        (t["logprob"] for t in e["top_logprobs"]), reverse=True))
    outside = sum(1 for e in logged if e["logprob"] < min(t["logprob"] for t in e["top_logprobs"][1:]))
    assert unsorted > 10 and outside > 3  # the fixture exercises both vLLM list shapes
    stats = import_vllm(src, inf, logprobs_mode="processed_logprobs", generation_config_source="request_only",
                        chat_template_sha256="c" * 64)
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
        (c["call_id"], c["reasons"]) for c in rep["calls"] if c["reasons"]]
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
