"""C-PRC-02 — cancellation avoidance (docs/contract-language.md#the-twelve-classes): LayerNorm forward error within
u*(8*kappa + 2*sqrt(D)), kappa = 1 + |mean|/std per row, on inputs with a large offset c + N(0, 1)."""

from __future__ import annotations

import torch

from .base import Case, abs_err, fmax, generator, loglog_slope, point_label, randn, seed_meta, sweep_points

EPS = 1e-5


def cases(contract, seeds):
    trials = int(contract.protocol_params["trials"])
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(sweep_points(contract, seed, {"c": 0, "D": 1024, "rows": 32, "value": "offset_gauss"})):
            c, D, rows = p["c"], p["D"], p["rows"]
            for t in range(trials):
                g = generator("prc02", seed, i, c, D, rows, t)
                x = (float(c) + randn((rows, D), g, torch.float64)).float()
                out.append(
                    Case(
                        f"s{seed}/p{i}/c{c}/D{D}x{rows}/t{t}",
                        [x],
                        expect_shape=(rows, D),
                        meta=seed_meta(seed, klass, **point_label(p), trial=t),
                    )
                )
    return out


def perturb(case):
    x = case.args[0].clone()
    x[:, 0] += 0.5
    return Case(case.key, [x], expect_shape=case.expect_shape, meta=dict(case.meta))


def oracle(x):
    return torch.nn.functional.layer_norm(x.double(), (x.shape[-1],), eps=EPS)


def measure(contract, cases, results):
    u = contract.unit_roundoff
    ms = []
    for key, c in cases.items():
        r = results[key]
        if not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(c.expect_shape):
            continue
        x = c.args[0]
        x64 = x.double()
        kappa = float((1 + x64.mean(-1).abs() / x64.std(-1).clamp_min(1e-300)).max())
        names = {
            "err": fmax(abs_err(r["outputs"][0], oracle(x))),
            "kappa": kappa,
            "c": float(c.meta["point"]["c"]),
            "D": x.shape[-1],
            "u": u,
        }
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
    by_c = {}
    for m in measurements:
        cval = m["names"]["c"]
        cur = by_c.get(cval)
        if cur is None or m["names"]["err"] > cur["err"]:
            by_c[cval] = {"err": m["names"]["err"], "kappa": m["names"]["kappa"]}
    pts = sorted((v["kappa"], v["err"]) for k, v in by_c.items() if k >= 10)
    slope = loglog_slope([p[0] for p in pts], [p[1] for p in pts])
    fails = any(
        not contract.relation.holds(dict(m["names"], bound=contract.bound.evaluate(m["names"]))) for m in measurements
    )
    pattern = None
    if fails:
        pattern = "err_quadratic_in_kappa" if slope is not None and slope > 1.5 else "err_above_linear_kappa_bound"
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "err_by_offset": {str(k): v["err"] for k, v in sorted(by_c.items())},
        "err_over_kappa2": {str(k): v["err"] / v["kappa"] ** 2 for k, v in sorted(by_c.items())},
        "loglog_slope_err_vs_kappa": slope,
    }


def naive_args(contract, trial):
    g = generator("prc02-naive", trial)
    return (randn((64, 1024), g),)
