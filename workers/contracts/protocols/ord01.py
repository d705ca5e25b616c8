"""C-ORD-01 — reduction-order tolerance (docs/contract-language.md#the-twelve-classes): e = |s - s64| / (u * mean|x|)
<= lambda*sqrt(N) + 1 with lambda = 6 (Higham-Mary: failure probability <= 2 exp(-lambda^2/2) ~ 3e-8). Any legal order
passes."""

from __future__ import annotations

from .base import Case, abs_err, fmax, generator, point_label, randn, seed_meta, sweep_points


def cases(contract, seeds):
    trials = int(contract.protocol_params["trials"])
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(sweep_points(contract, seed, {"N": 1024, "rows": 256, "value": "gauss"})):
            N, rows = p["N"], p["rows"]
            for t in range(trials):
                g = generator("ord01", seed, N, t) if rows == 256 else generator("ord01", seed, i, N, rows, t)
                x = randn((rows, N), g)
                if p["value"] == "offset_gauss":
                    x = x + 100.0
                out.append(
                    Case(
                        f"s{seed}/p{i}/N{N}x{rows}/t{t}",
                        [x],
                        expect_shape=(rows,),
                        meta=seed_meta(seed, klass, **point_label(p), trial=t),
                    )
                )
    return out


def perturb(case):
    x = case.args[0].clone()
    x[:, 0] += 1.0
    return Case(case.key, [x], expect_shape=case.expect_shape, meta=dict(case.meta))


def error_e(x, out, u):
    x64 = x.double()
    ref = x64.mean(-1)
    return fmax(abs_err(out, ref) / (u * x64.abs().mean(-1)))


def measure(contract, cases, results):
    u = contract.unit_roundoff
    ms = []
    for key, c in cases.items():
        r = results[key]
        if not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(c.expect_shape):
            continue
        x = c.args[0]
        names = {"e": error_e(x, r["outputs"][0], u), "N": x.shape[-1], "u": u}
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
    by_n = {}
    for m in measurements:
        by_n[m["names"]["N"]] = max(by_n.get(m["names"]["N"], 0.0), m["names"]["e"])
    fails = any(
        not contract.relation.holds(dict(m["names"], bound=contract.bound.evaluate(m["names"]))) for m in measurements
    )
    pattern = "error_above_fpna_envelope" if fails else None
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "e_max_by_N": {str(k): v for k, v in sorted(by_n.items())},
    }


def naive_args(contract, trial):
    g = generator("ord01-naive", trial)
    return (randn((256, 1024), g),)
