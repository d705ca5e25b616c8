"""C-ORD-02 — atomic determinism class (docs/contract-language.md#the-twelve-classes), BITWISE: R launches on
identical inputs, interleaved with unrelated work, give one bit pattern; accuracy within C-ORD-01's envelope for the
sum."""

from __future__ import annotations

from .base import Case, abs_err, fmax, generator, point_label, randn, seed_meta, sweep_points


def cases(contract, seeds):
    R = int(contract.protocol_params.get("repetitions") or 20)
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(sweep_points(contract, seed, {"N": 1024, "rows": 64, "value": "gauss"})):
            N, rows = p["N"], p["rows"]
            g = generator("ord02", seed) if (N, rows) == (1024, 64) else generator("ord02", seed, i, N, rows)
            out.append(
                Case(
                    f"s{seed}/p{i}/N{N}x{rows}/R{R}",
                    [randn((rows, N), g)],
                    expect_shape=(rows,),
                    repeat=R,
                    interleave=True,
                    meta=seed_meta(seed, klass, **point_label(p), R=R),
                )
            )
    return out


def perturb(case):
    x = case.args[0].clone()
    x[:, 0] += 1.0
    return Case(case.key, [x], expect_shape=case.expect_shape, repeat=2, meta=dict(case.meta))


def measure(contract, cases, results):
    u = contract.unit_roundoff
    ms = []
    for key, c in cases.items():
        if c.meta.get("sensitivity_of"):
            continue
        r = results[key]
        if not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(c.expect_shape):
            continue
        x = c.args[0]
        x64 = x.double()
        # same normalisation as C-ORD-01's mean: |sum error| / (u * sum|x|) == |mean error| / (u * mean|x|)
        e = fmax(abs_err(r["outputs"][0], x64.sum(-1)) / (u * x64.abs().sum(-1)))
        distinct = len(set(r["hashes"]))
        names = {"distinct_extra": distinct - 1, "R": len(r["hashes"]), "e": e, "N": x.shape[-1]}
        ms.append(
            {
                "point": c.meta["point"],
                "seed": c.meta["seed"],
                "seed_class": c.meta["seed_class"],
                "names": names,
                "cases": [key],
                "input_hash": r.get("input_hash"),
            }
        )
    return ms


def signature(contract, measurements):
    if not measurements:
        return {"pattern": None}
    worst = max(measurements, key=lambda m: m["names"]["distinct_extra"])
    e_max = max(m["names"]["e"] for m in measurements)
    pattern = None
    if worst["names"]["distinct_extra"]:
        pattern = "run_to_run_variation"
    elif any(
        not contract.relation.holds(dict(m["names"], bound=contract.bound.evaluate(m["names"]))) for m in measurements
    ):
        pattern = "error_above_fpna_envelope"
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "distinct_outputs": worst["names"]["distinct_extra"] + 1,
        "launches": worst["names"]["R"],
        "e_max": e_max,
    }


def naive_args(contract, trial):
    g = generator("ord02-naive", trial)
    return (randn((64, 1024), g),)
