"""C-EXC-01 — NaN/Inf propagation (docs/contract-language.md#the-twelve-classes), IEEE_PROPAGATE for a row max: the
output NaN mask equals "any NaN in the row", +Inf and -Inf masks match separately, finite maxima are exact (T0)."""

from __future__ import annotations

import torch

from .base import Case, domain_values, generator, point_label, randn, seed_meta, sweep_points


def _inject(x, g):
    """Structured rows first (single NaN at start / middle / end, whole-row NaN, whole-row -inf, +inf, -inf single,
    NaN next to +inf), then one NaN / +inf / -inf at a position drawn from the seed in every third row; a wide row
    therefore carries its NaN anywhere, not only at a tile edge."""
    R, N = x.shape
    x = x.clone()
    nan, inf = float("nan"), float("inf")
    structured = [
        lambda r: x[r].__setitem__(0, nan),
        lambda r: x[r].__setitem__(N // 2, nan),
        lambda r: x[r].__setitem__(N - 1, nan),
        lambda r: x[r].fill_(nan),
        lambda r: x[r].fill_(-inf),
        lambda r: x[r].__setitem__(N // 3, inf),
        lambda r: x[r].__setitem__(0, -inf),
        lambda r: (x[r].__setitem__(1 % N, inf), x[r].__setitem__(0, nan)),
    ]
    for r in range(min(R, len(structured))):
        structured[r](r)
    start = len(structured) if R > len(structured) else 0
    for r in range(start, R, 3 if R > len(structured) else 1):
        pos = int(torch.randint(0, N, (1,), generator=g))
        kind = int(torch.randint(0, 3, (1,), generator=g))
        if R <= len(structured) and r < len(structured):
            kind = 0  # few rows: the structured row above plus a NaN at a drawn position
        x[r, pos] = (nan, inf, -inf)[kind]
    return x


def cases(contract, seeds):
    trials = int(contract.protocol_params["trials"])
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(sweep_points(contract, seed, {"R": 64, "N": 256, "value": "nan_inf_any_position"})):
            R, N = p["R"], p["N"]
            for t in range(trials):
                g = generator("exc01", seed, t) if (R, N) == (64, 256) else generator("exc01", seed, i, R, N, t)
                x = randn((R, N), g)
                # the NaN/inf injections, or one of the shared generators of the declared domain (base.domain_values)
                x = _inject(x, g) if p["value"] == "nan_inf_any_position" else domain_values(x, p["value"], g)
                out.append(
                    Case(
                        f"s{seed}/p{i}/R{R}N{N}/t{t}",
                        [x],
                        expect_shape=(R,),
                        meta=seed_meta(seed, klass, **point_label(p), trial=t),
                    )
                )
    return out


def perturb(case):
    x = case.args[0].clone()
    x[10:] = x[10:] + 1.0
    return Case(case.key, [x], expect_shape=case.expect_shape, meta=dict(case.meta))


def oracle(x):
    """Policy table: NaN if any NaN in the row, else the max (+inf / -inf included)."""
    x64 = x.double()
    ref = torch.where(torch.isnan(x64), torch.full_like(x64, float("-inf")), x64).amax(-1)
    return torch.where(torch.isnan(x64).any(-1), torch.full_like(ref, float("nan")), ref)


def measure(contract, cases, results):
    ms = []
    for key, c in cases.items():
        r = results[key]
        if not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(c.expect_shape):
            continue
        out = r["outputs"][0].double()
        ref = oracle(c.args[0])
        nan_dropped = int((torch.isnan(ref) & ~torch.isnan(out)).sum())
        spurious = int((~torch.isnan(ref) & torch.isnan(out)).sum())
        inf_mis = int(
            ((torch.isposinf(ref) != torch.isposinf(out)) | (torch.isneginf(ref) != torch.isneginf(out))).sum()
        )
        fin = torch.isfinite(ref) & torch.isfinite(out)
        val = int((out[fin] != ref[fin]).sum())
        mism = int((~((torch.isnan(ref) & torch.isnan(out)) | (ref == out))).sum())
        names = {"mismatch": mism, "R": out.shape[0], "N": c.args[0].shape[-1]}
        ms.append(
            {
                "point": c.meta["point"],
                "seed": c.meta["seed"],
                "seed_class": c.meta["seed_class"],
                "names": names,
                "cases": [key],
                "input_hash": r.get("input_hash"),
                "detail": {
                    "nan_dropped": nan_dropped,
                    "spurious_nan": spurious,
                    "inf_mismatch": inf_mis,
                    "value_mismatch": val,
                    "nan_rows": int(torch.isnan(ref).sum()),
                },
            }
        )
    return ms


def signature(contract, measurements):
    tot = {"nan_dropped": 0, "spurious_nan": 0, "inf_mismatch": 0, "value_mismatch": 0, "nan_rows": 0}
    for m in measurements:
        for k in tot:
            tot[k] += m["detail"][k]
    order = ("nan_dropped", "spurious_nan", "inf_mismatch", "value_mismatch")
    pattern = next((k for k in order if tot[k]), None)
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        **tot,
    }


def naive_args(contract, trial):
    g = generator("exc01-naive", trial)
    return (randn((64, 256), g),)
