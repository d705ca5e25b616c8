"""C-ORD-03 — partition (batch) invariance (spec §8): f(X)[i] == f(x_i) bit-exactly for every batch size b
in the sweep and every position; the oracle is the implementation's own batch-1 evaluation."""
from __future__ import annotations

import math

from .base import Case, bits, generator, randn, seed_meta


def _p(contract, name, default):
    return list((contract.protocol_params.get("sweeps") or {}).get(name, default))


def cases(contract, seeds):
    bs = _p(contract, "b", [1, 2, 3, 4, 8, 64])
    K, N = _p(contract, "K", [1024])[0], _p(contract, "N", [1024])[0]
    out = []
    bmax = max(bs)
    for seed, klass in seeds:
        g = generator("ord03", seed)
        x = randn((bmax, K), g)
        w = randn((K, N), g) / math.sqrt(K)
        for i in range(bmax):
            out.append(Case(f"s{seed}/row{i}", [x[i:i + 1].clone(), w], expect_shape=(1, N),
                            meta=dict(seed_meta(seed, klass, row=i), no_sensitivity=True, row=i)))
        for b in bs:
            out.append(Case(f"s{seed}/b{b}", [x[:b].clone(), w], expect_shape=(b, N),
                            meta=dict(seed_meta(seed, klass, b=b, K=K, N=N), b=b)))
    return out


def perturb(case):
    x, w = case.args
    x2 = x.clone()
    x2[0, 0] += 1.0
    return Case(case.key, [x2, w], expect_shape=case.expect_shape, meta=dict(case.meta))


def measure(contract, cases, results):
    ms = []
    for key, c in cases.items():
        if "b" not in c.meta or c.meta.get("sensitivity_of"):
            continue
        r = results[key]
        if not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(c.expect_shape):
            continue
        out = r["outputs"][0]
        seed = c.meta["seed"]
        rows = []
        for i in range(c.meta["b"]):
            ri = results.get(f"s{seed}/row{i}")
            rows.append(ri["outputs"][0][0] if ri and ri["outputs"] and ri["outputs"][0].dim() == 2 else None)
        mism, where = 0, []
        for i, ref in enumerate(rows):
            if ref is None or ref.dtype != out.dtype or not bool((bits(out[i]) == bits(ref)).all()):
                mism += 1
                where.append(i)
        x, w = c.args
        names = {"mismatch_rows": mism, "b": c.meta["b"], "K": x.shape[1], "N": w.shape[1]}
        ms.append({"point": c.meta["point"], "seed": seed, "seed_class": c.meta["seed_class"], "names": names,
                   "cases": [key], "input_hash": r.get("input_hash"), "rows": where[:8]})
    return ms


def signature(contract, measurements):
    by_b = {}
    for m in measurements:
        b = m["names"]["b"]
        by_b[b] = max(by_b.get(b, 0.0), m["names"]["mismatch_rows"] / b)
    failing = sorted(b for b, f in by_b.items() if f > 0)
    pattern = None
    if failing:
        passing_above = [b for b in by_b if b > failing[0] and by_b[b] == 0]
        pattern = "batch_position_dependent" if passing_above or any(0 < by_b[b] < 1 for b in failing) else "batch_size_step"
    return {"pattern": pattern, "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
            "mismatch_fraction_by_batch": {str(b): by_b[b] for b in sorted(by_b)},
            "first_failing_batch": failing[0] if failing else None}


def naive_args(contract, trial):
    g = generator("ord03-naive", trial)
    return (randn((64, 1024), g), randn((1024, 1024), g) / 32.0)
