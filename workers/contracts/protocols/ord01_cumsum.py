"""C-ORD-01 for prefix sums (docs/contracts.md#cumsum): ``cumsum(x[R,N]) -> [R,N]`` along the last dim, fp32, every
prefix within a derived reduction-order error bound, and (declared ``aliasing: FORBIDDEN``) the output never in the
input's memory.

Statistic ``e = max_j |out_j - ref_j| / (u * S_j)`` with ``S_j = sum_{i<=j} |x_i|`` (the condition of the j-th
prefix; ref in fp64 on the given inputs). Any order of fp32 additions — sequential, blocked with carries, a
work-efficient tree scan — has a worst-case error gamma_(j-1) S_j, and its typical error grows like sqrt(j) u S_j
(Higham & Mary); the bound ``2*sqrt(N) + 16`` sits well above what those reach on the generated values (calibrated,
docs/contracts.md#cumsum) and far below a carry or an accumulator kept in fp16 (e ~ 2**13 wherever the carry is of
the order of S_j) or a lost carry (e ~ 1/u)."""

from __future__ import annotations

import torch

from .base import Case, fmax, generator, point_label, randn, seed_meta, sweep_points


def values(kind, rows, n, g):
    """``gauss``: N(0, 1); ``offset_gauss``: 1 + N(0, 1) (prefixes grow like j: a carry's rounding shows);
    ``signed_zeros``: exact zeros and -0.0 among N(0, 1)."""
    x = randn((rows, n), g)
    if kind == "offset_gauss":
        x = x + 1.0
    elif kind == "signed_zeros":
        mask = torch.rand((rows, n), generator=g) < 0.25
        x = torch.where(mask, torch.where(torch.rand((rows, n), generator=g) < 0.5, 0.0, -0.0), x)
    return x


def cases(contract, seeds):
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(sweep_points(contract, seed, {"N": 1024, "rows": 16, "value": "gauss"})):
            x = values(p["value"], p["rows"], p["N"], generator("ord01-cumsum", seed, i, p["N"], p["value"]))
            out.append(
                Case(
                    f"s{seed}/p{i}/{p['rows']}x{p['N']}/{p['value']}",
                    [x],
                    expect_shape=tuple(x.shape),
                    meta=seed_meta(seed, klass, **point_label(p)),
                )
            )
    return out


def perturb(case):
    x = case.args[0].clone()
    x[0, 0] += 1.0
    return Case(case.key, [x], expect_shape=case.expect_shape, meta=dict(case.meta))


def measure(contract, cases, results):
    u = contract.unit_roundoff
    ms = []
    for key, c in cases.items():
        if c.meta.get("sensitivity_of"):
            continue
        r = results[key]
        if not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(c.expect_shape):
            continue
        x64 = c.args[0].double()
        ref = torch.cumsum(x64, -1)
        cond = torch.cumsum(x64.abs(), -1).clamp_min(2.0**-149)
        err = (r["outputs"][0].double() - ref).abs()
        err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
        e = err / (u * cond)
        worst = int(torch.argmax(torch.nan_to_num(e, posinf=1e300)))
        ms.append(
            {
                "point": c.meta["point"],
                "seed": c.meta["seed"],
                "seed_class": c.meta["seed_class"],
                "names": {"e": fmax(e), "N": x64.shape[1], "u": u},
                "cases": [key],
                "input_hash": r.get("input_hash"),
                "worst_position": worst % x64.shape[1],
            }
        )
    return ms


def signature(contract, measurements):
    if not measurements:
        return {"pattern": None}
    bad = [m for m in measurements if m["names"]["e"] > float(contract.bound.evaluate(dict(m["names"])))]
    pattern = None
    if bad:
        e = max(m["names"]["e"] for m in bad)
        # a lost carry is off by a whole prefix (finite, ~1/u); a narrow carry is off by its rounding, or overflows
        pattern = "lost_carry" if 1e5 < e < float("inf") else "narrow_accumulator"
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "e_max_by_N": {str(m["names"]["N"]): m["names"]["e"] for m in measurements},
        "first_bad_position": bad[0]["worst_position"] if bad else None,
    }


def naive_args(contract, trial):
    return (randn((64, 256), generator("ord01-cumsum-naive", trial)),)
