"""C-ORD-03 — partition (batch) invariance (docs/contract-language.md#the-twelve-classes): f(X)[i] == f(x_i)
bit-exactly for every batch size b in the sweep and every position; the oracle is the implementation's own batch-1
evaluation."""

from __future__ import annotations

import math

from .base import Case, bits, generator, point_label, randn, seed_meta, sweep_points


ROW_SAMPLE = 8


def _rows_to_check(seed, K, N, bmax):
    """Row 0, row 1 and the last row of the largest batch, plus rows drawn from the seed (a hidden seed checks
    rows a submitter cannot know). Every batch is compared on the sampled rows it contains."""
    import random

    rng = random.Random(f"ord03-rows|{seed}|{K}|{N}|{bmax}")
    rows = {0, min(1, bmax - 1), bmax - 1}
    while len(rows) < min(ROW_SAMPLE, bmax):
        rows.add(rng.randrange(bmax))
    return sorted(rows)


def cases(contract, seeds):
    out = []
    for seed, klass in seeds:
        points = sweep_points(contract, seed, {"b": 1, "K": 1024, "N": 1024, "value": "gauss"})
        for K, N in dict.fromkeys((p["K"], p["N"]) for p in points):
            bs = sorted({p["b"] for p in points if (p["K"], p["N"]) == (K, N)})
            bmax = max(bs)
            g = generator("ord03", seed) if (K, N) == (1024, 1024) else generator("ord03", seed, K, N)
            x = randn((bmax, K), g)
            w = randn((K, N), g) / math.sqrt(K)
            tag = f"s{seed}/K{K}N{N}"
            for i in _rows_to_check(seed, K, N, bmax):
                out.append(
                    Case(
                        f"{tag}/row{i}",
                        [x[i : i + 1].clone(), w],
                        expect_shape=(1, N),
                        meta=dict(seed_meta(seed, klass, row=i, K=K, N=N), no_sensitivity=True, row=i, group=tag),
                    )
                )
            for b in bs:
                p = next(p for p in points if (p["b"], p["K"], p["N"]) == (b, K, N))
                out.append(
                    Case(
                        f"{tag}/b{b}",
                        [x[:b].clone(), w],
                        expect_shape=(b, N),
                        meta=dict(seed_meta(seed, klass, **point_label(p)), b=b, group=tag),
                    )
                )
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
        group = c.meta.get("group", f"s{seed}")
        mism, where, checked = 0, [], 0
        for k2, c2 in cases.items():
            i = c2.meta.get("row")
            if i is None or c2.meta.get("group", f"s{seed}") != group or c2.meta["seed"] != seed or i >= c.meta["b"]:
                continue
            checked += 1
            ri = results.get(k2)
            ref = ri["outputs"][0][0] if ri and ri["outputs"] and ri["outputs"][0].dim() == 2 else None
            if ref is None or ref.dtype != out.dtype or not bool((bits(out[i]) == bits(ref)).all()):
                mism += 1
                where.append(i)
        x, w = c.args
        names = {"mismatch_rows": mism, "b": c.meta["b"], "K": x.shape[1], "N": w.shape[1]}
        if not checked:
            continue
        ms.append(
            {
                "point": c.meta["point"],
                "seed": seed,
                "seed_class": c.meta["seed_class"],
                "names": names,
                "cases": [key],
                "input_hash": r.get("input_hash"),
                "rows": where[:8],
                "checked_rows": checked,
            }
        )
    return ms


def signature(contract, measurements):
    by_b = {}
    for m in measurements:
        b = m["names"]["b"]
        by_b[b] = max(by_b.get(b, 0.0), m["names"]["mismatch_rows"] / max(m.get("checked_rows", b), 1))
    failing = sorted(b for b, f in by_b.items() if f > 0)
    pattern = None
    if failing:
        passing_above = [b for b in by_b if b > failing[0] and by_b[b] == 0]
        pattern = (
            "batch_position_dependent" if passing_above or any(0 < by_b[b] < 1 for b in failing) else "batch_size_step"
        )
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "mismatch_fraction_by_batch": {str(b): by_b[b] for b in sorted(by_b)},
        "first_failing_batch": failing[0] if failing else None,
    }


def naive_args(contract, trial):
    g = generator("ord03-naive", trial)
    return (randn((64, 1024), g), randn((1024, 1024), g) / 32.0)
