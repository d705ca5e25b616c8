"""Routing fields: storage cost and audit speed (docs/routing.md, "Measured").

    .venv/bin/python bench/routing.py                 # defaults: 48 layers, 128 experts, top-8, 20k tokens
    .venv/bin/python bench/routing.py --tokens 5000 --layers 24 --experts 64 --top-k 4

1. bytes per response token of fcr-parquet/1 (zstd) for the same run without routes, with the rollout's routes, with
   the trainer's too — as a difference from the rollout's (column trainer_routes_delta, what the writer does) and,
   for comparison in the same process, stored whole as before — at 1 % flipped selections and with replay (0 %), and
   with the router's probabilities, for two route distributions: uniform random experts (the incompressible worst
   case) and skewed experts (Zipf-like popularity per layer, as trained routers show); the fcr/1 JSONL size of the
   routes next to it;
2. the routes of the tiny MoE model of workers/training/moe.py (4 layers, 8 experts, top-2, bf16 vs fp32);
3. speed: ``python -m workers.routing audit`` (workers.routing.file.audit_file) against the certificate alone
   (workers.certify.file.certify_file) on the same Parquet file, best of --repeat, and against the audit of the same
   run written with the trainer's routes whole (the cost of decoding the difference).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workers.fcr.parquet_write import Writer


def _routes(rng, T, L, E, K, skew):
    if not skew:
        return np.argsort(rng.random((T, L, E)), -1)[..., :K]
    # per layer a Zipf-like popularity over experts; K distinct experts drawn by it, in descending-score order
    w = 1.0 / np.arange(1, E + 1) ** 1.1
    out = np.empty((T, L, K), np.int64)
    for layer in range(L):
        p = rng.permutation(w / w.sum())
        g = -np.log(-np.log(rng.random((T, E)))) + np.log(p)  # Gumbel top-k = sampling without replacement
        out[:, layer] = np.argsort(-g, -1)[:, :K]
    return out


def _records(rng, T_total, L, E, K, skew, *, rollout=True, trainer=False, probs=False, flip=0.01):
    recs, t = [], 0
    i = 0
    while t < T_total:
        n = int(min(rng.integers(200, 800), T_total - t))
        lp = np.log(rng.uniform(0.05, 1, n))
        rec = {
            "schema": "fcr/1",
            "run_id": "bench",
            "trajectory_id": f"t{i}",
            "call_id": f"c{i}",
            "step": 0,
            "call_index": 0,
            "role": "policy",
            "role_source": "header",
            "model": {"served_name": "moe", "policy_version": 0, "num_experts": E},
            "tokenizer": {"id": "bench", "sha256": "0" * 64},
            "chat_template": None,
            "engine": {
                "name": "vllm",
                "api": "generate",
                "logprobs_mode": "raw_logprobs",
                "generation_config_source": "request_only",
            },
            "sampling": {},
            "source": {"format": "synthetic", "ref": f"c{i}", "importer_version": "1"},
            "prompt": {
                "token_ids": rng.integers(0, 50000, 64).tolist(),
                "provenance": "engine",
                "ids_sha256": "0" * 64,
            },
            "response": {
                "token_ids": rng.integers(0, 50000, n).tolist(),
                "provenance": "engine",
                "ids_sha256": "0" * 64,
            },
            "rollout": {"logprobs": lp.tolist()},
            "trainer": {"policy_version": 0, "logprobs": (lp - rng.exponential(0.01, n)).tolist()},
        }
        if rollout:
            r = _routes(rng, n, L, E, K, skew)
            rec["rollout"]["routed_experts"] = r
            if trainer:
                tr = r.copy()
                m = rng.random((n, L)) < flip
                tr[m] = _routes(rng, int(m.sum()), 1, E, K, skew)[:, 0]
                rec["trainer"]["routed_experts"] = tr
            if probs:
                pr = np.sort(rng.dirichlet(np.ones(E), (n, L)), -1)[..., ::-1][..., :K].astype(np.float32)
                rec["rollout"]["router_topk_probs"] = pr
        recs.append(rec)
        t += n
        i += 1
    return recs, t


def parquet_bytes(recs, path, whole_trainer_routes=False):
    """File size; ``whole_trainer_routes``: the trainer's routes in a column of their own, the encoding before
    trainer_routes_delta (the writer's difference step switched off for this file only)."""
    from workers.fcr import parquet_write

    saved = parquet_write._delta_row
    if whole_trainer_routes:
        parquet_write._delta_row = lambda row: row
    try:
        with Writer(path, float_type="float32") as w:
            for r in recs:
                w.add(r)
    finally:
        parquet_write._delta_row = saved
    return os.path.getsize(path)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    L, E, K = a.layers, a.experts, a.top_k
    tmp = tempfile.mkdtemp()
    print(f"1. bytes per response token, fcr-parquet/1 float32 zstd, {a.tokens} tokens, L={L} E={E} top-{K}")
    for skew in (False, True):
        base = rollout_only = None
        trainer_side = {}
        for label, whole, kw in (
            ("no routes", False, dict(rollout=False)),
            ("rollout routes", False, {}),
            ("+ trainer, 1% flips, whole", True, dict(trainer=True)),
            ("+ trainer, 1% flips, delta", False, dict(trainer=True)),
            ("+ trainer, replayed, whole", True, dict(trainer=True, flip=0.0)),
            ("+ trainer, replayed, delta", False, dict(trainer=True, flip=0.0)),
            ("+ router probs (delta)", False, dict(trainer=True, probs=True)),
        ):
            recs, T = _records(np.random.default_rng(1), a.tokens, L, E, K, skew, **kw)
            b = parquet_bytes(recs, os.path.join(tmp, "x.parquet"), whole_trainer_routes=whole)
            base = b if base is None else base
            rollout_only = b if label == "rollout routes" else rollout_only
            if label.startswith("+ trainer"):
                trainer_side[label] = (b - rollout_only) / T
            extra = (
                "" if b == base else f"  (routes: {(b - base) / T:.1f} B/token, {(b - base) / T / L:.2f} B per layer)"
            )
            print(f"   {'skewed' if skew else 'uniform'} experts, {label:<30} {b / T:8.1f} B/token{extra}")
        for flips in ("1% flips", "replayed"):
            w, d = trainer_side[f"+ trainer, {flips}, whole"], trainer_side[f"+ trainer, {flips}, delta"]
            print(
                f"   {'skewed' if skew else 'uniform'} experts, trainer routes ({flips}): {w:.1f} B/token whole, "
                f"{d:.2f} B/token as a difference ({w / d:.0f}x smaller)"
            )
        js = sum(len(orjson.dumps(r["rollout"]["routed_experts"].tolist())) for r in recs) / T
        print(f"   {'skewed' if skew else 'uniform'} experts, rollout routes as fcr/1 JSON text: {js:.1f} B/token")

    print("2. the tiny MoE model (workers/training/moe.py: 4 layers, 8 experts, top-2), bf16 rollout vs fp32 trainer")
    from workers.training.moe import experiment_records, routing_experiment

    t0 = time.perf_counter()
    exp = routing_experiment(batch=16, length=32)
    t_exp = time.perf_counter() - t0
    recs = experiment_records(exp)
    T = sum(len(r["response"]["token_ids"]) for r in recs)
    nor = [
        dict(
            r,
            rollout={"logprobs": r["rollout"]["logprobs"]},
            trainer={k: v for k, v in r["trainer"].items() if k != "routed_experts"},
        )
        for r in recs
    ]
    b0 = parquet_bytes(nor, os.path.join(tmp, "a.parquet"))
    b1 = parquet_bytes(recs, os.path.join(tmp, "b.parquet"))
    print(f"   {T} tokens (experiment {t_exp:.1f} s); routes of both sides add {(b1 - b0) / T:.2f} B/token")
    from workers.routing import RoutingAudit, TokenMetrics

    for label, key, tv, lp in (
        ("routing freely", "trainer_routes", "tv", "trainer_logp"),
        ("replaying the rollout's routes (R3)", "replayed_routes", "tv_replay", "replay_logp"),
    ):
        audit = RoutingAudit()
        for b in range(len(recs)):
            audit.add_call(
                b,
                rollout=exp["rollout_routes"][b],
                trainer=exp[key][b],
                metrics=TokenMetrics(
                    tv_hi=exp[tv][b], tv_lo=exp[tv][b], abs_dlogp=np.abs(exp[lp][b] - exp["rollout_logp"][b])
                ),
            )
        r = audit.result()
        at = r["attribution"]
        print(
            f"   trainer {label}: flip rate {r['flip_rate']:.4f}, tokens with a flip {r['token_flip_share']:.4f}; "
            f"mean exact TV {at['all']['tv_hi']['mean']:.5f} (agree {at['agree']['tv_hi']['mean']:.5f}, flipped "
            f"{at['flipped'].get('tv_hi', {}).get('mean', float('nan')):.5f}); flipped tokens carry "
            f"{at['flipped_share']['tv_hi']:.1%} of sum TV, {at['flipped_share']['abs_dlogp']:.1%} of sum |dlogp|"
        )

    print("3. speed on one Parquet file (rollout + trainer routes, skewed, no top-K), best of", a.repeat)
    from workers.certify.file import certify_file
    from workers.routing.file import audit_file

    recs, T = _records(np.random.default_rng(2), a.tokens, L, E, K, True, trainer=True)
    path = os.path.join(tmp, "c.parquet")
    parquet_bytes(recs, path)

    def best(f):
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return min(ts)

    whole = os.path.join(tmp, "w.parquet")
    parquet_bytes(recs, whole, whole_trainer_routes=True)
    tc = best(lambda: certify_file(path))
    ta = best(lambda: audit_file(path))
    tw = best(lambda: audit_file(whole))
    print(
        f"   certify_file {tc:.3f} s, routing audit_file {ta:.3f} s ({ta / tc:.1f}x the certificate); "
        f"{T * L / ta / 1e6:.2f} M (token, layer) pairs/s"
    )
    print(
        f"   the same run with the trainer's routes stored whole: audit_file {tw:.3f} s (difference decoding: "
        f"{ta / tw:.2f}x of that)"
    )


if __name__ == "__main__":
    main()
