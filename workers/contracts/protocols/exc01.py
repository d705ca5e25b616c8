"""C-EXC-01 — NaN/Inf propagation (spec §8), IEEE_PROPAGATE for a row max: the output NaN mask equals
"any NaN in the row", +Inf and -Inf masks match separately, finite maxima are exact (T0)."""
from __future__ import annotations

import torch

from .base import Case, generator, randn, seed_meta


def _p(contract, name, default):
    return (contract.protocol_params.get("sweeps") or {}).get(name, [default])[0]


def _inject(x, g):
    R, N = x.shape
    x = x.clone()
    nan, inf = float("nan"), float("inf")
    # structured rows: single NaN at start / middle / end, whole-row NaN, whole-row -inf, +inf, -inf single,
    # NaN next to +inf, and random positions in a band of rows
    x[0, 0] = nan
    x[1, N // 2] = nan
    x[2, N - 1] = nan
    x[3] = nan
    x[4] = -inf
    x[5, N // 3] = inf
    x[6, 0] = -inf
    x[7, 1 % N] = inf
    x[7, 0] = nan
    for r in range(8, R, 3):
        pos = int(torch.randint(0, N, (1,), generator=g))
        kind = int(torch.randint(0, 3, (1,), generator=g))
        x[r, pos] = (nan, inf, -inf)[kind]
    return x


def cases(contract, seeds):
    R, N = _p(contract, "R", 64), _p(contract, "N", 256)
    trials = int(contract.protocol_params["trials"])
    out = []
    for seed, klass in seeds:
        for t in range(trials):
            g = generator("exc01", seed, t)
            x = _inject(randn((R, N), g), g)
            out.append(Case(f"s{seed}/t{t}", [x], expect_shape=(R,), meta=seed_meta(seed, klass, R=R, N=N, trial=t)))
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
        inf_mis = int(((torch.isposinf(ref) != torch.isposinf(out)) | (torch.isneginf(ref) != torch.isneginf(out))).sum())
        fin = torch.isfinite(ref) & torch.isfinite(out)
        val = int((out[fin] != ref[fin]).sum())
        mism = int((~((torch.isnan(ref) & torch.isnan(out)) | (ref == out))).sum())
        names = {"mismatch": mism, "R": out.shape[0], "N": c.args[0].shape[-1]}
        ms.append({"point": c.meta["point"], "seed": c.meta["seed"], "seed_class": c.meta["seed_class"], "names": names,
                   "cases": [key], "input_hash": r.get("input_hash"),
                   "detail": {"nan_dropped": nan_dropped, "spurious_nan": spurious, "inf_mismatch": inf_mis,
                              "value_mismatch": val, "nan_rows": int(torch.isnan(ref).sum())}})
    return ms


def signature(contract, measurements):
    tot = {"nan_dropped": 0, "spurious_nan": 0, "inf_mismatch": 0, "value_mismatch": 0, "nan_rows": 0}
    for m in measurements:
        for k in tot:
            tot[k] += m["detail"][k]
    order = ("nan_dropped", "spurious_nan", "inf_mismatch", "value_mismatch")
    pattern = next((k for k in order if tot[k]), None)
    return {"pattern": pattern, "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
            **tot}


def naive_args(contract, trial):
    g = generator("exc01-naive", trial)
    return (randn((64, 256), g),)
