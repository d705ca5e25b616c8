"""C-CMP-01 for GELU (docs/contracts.md#gelu-exact-versus-tanh): a kernel that declares the exact GELU,
x * Phi(x) = x/2 * (1 + erf(x/sqrt 2)), must not be the tanh approximation (or any other substitute) — a transformed
op that equals the declared one only to within 1e-3 — and, declared ``aliasing: ALLOWED_INPLACE``, an in-place call
(``out`` is ``x``) must give the same bits as an out-of-place one.

Statistic ``e = max |out - ref| / (u * (|ref| + |x|))`` against the fp64 exact GELU of the given input: the scale
``|x|`` is the rounding a correct fp32 kernel cannot avoid where ``1 + erf`` cancels (x << 0, |ref| tiny), so the
bound is a few units; the tanh form deviates by up to 2e-4 absolute around |x| ~ 2, thousands of units.
"""

from __future__ import annotations

import math

import torch

from .base import Case, Out, abs_err, fmax, generator, point_label, randn, seed_meta, sweep_points

DPS = True


def gelu64(x: torch.Tensor) -> torch.Tensor:
    x64 = x.double()
    return 0.5 * x64 * (1.0 + torch.erf(x64 / math.sqrt(2.0)))


def values(kind, n, g):
    """``gauss``: 3 N(0, 1); ``grid``: a dense sweep of [-10, 10] (where tanh and erf forms differ most, the
    cancelling negative tail and the saturation) with exact zeros and -0.0; ``wide``: magnitudes up to 1e4."""
    if kind == "grid":
        x = torch.linspace(-10.0, 10.0, n, dtype=torch.float64).to(torch.float32)
        x[:: max(1, n // 7)] = 0.0
        if n > 1:
            x[1] = -0.0
        return x
    if kind == "wide":
        return (randn((n,), g).double() * 10.0 ** (torch.rand(n, generator=g, dtype=torch.float64) * 4)).float()
    return 3.0 * randn((n,), g)


def cases(contract, seeds):
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(sweep_points(contract, seed, {"n": 4096, "value": "gauss"})):
            n = p["n"]
            x = values(p["value"], n, generator("cmp01-gelu", seed, i, n, p["value"]))
            meta = seed_meta(seed, klass, **point_label(p))
            key = f"s{seed}/p{i}/n{n}/{p['value']}"
            out.append(Case(key, [x, Out((n,))], expect_shape=(n,), meta=meta))
            out.append(
                Case(
                    f"{key}/inplace",
                    [x, Out((n,), alias_of=0)],
                    expect_shape=(n,),
                    meta=dict(meta, inplace_of=key, no_sensitivity=True),
                )
            )
    return out


def perturb(case):
    x = case.args[0].clone()
    x[0] = x[0] * 1.5 + 0.25
    return Case(case.key, [x, Out(case.args[1].shape)], expect_shape=case.expect_shape, meta=dict(case.meta))


def _first(results, key, case):
    r = results.get(key)
    if not r or not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(case.expect_shape):
        return None
    return r["outputs"][0]


def measure(contract, cases, results):
    u = contract.unit_roundoff
    inplace = {c.meta["inplace_of"]: k for k, c in cases.items() if c.meta.get("inplace_of")}
    ms = []
    for key, c in cases.items():
        if c.meta.get("inplace_of") or c.meta.get("sensitivity_of"):
            continue
        out = _first(results, key, c)
        if out is None:
            continue
        x = c.args[0]
        ref = gelu64(x)
        e = abs_err(out, ref) / (u * (ref.abs() + x.double().abs())).clamp_min(2.0**-149 / u)
        mismatch = x.numel()
        if key in inplace:
            o2 = _first(results, inplace[key], cases[inplace[key]])
            if o2 is not None and o2.dtype == out.dtype:
                mismatch = int((o2.view(torch.int32) != out.view(torch.int32)).sum())
        worst = int(torch.argmax(torch.nan_to_num(e, posinf=1e300))) if e.numel() else 0
        ms.append(
            {
                "point": c.meta["point"],
                "seed": c.meta["seed"],
                "seed_class": c.meta["seed_class"],
                "names": {"e": fmax(e), "inplace_mismatch": mismatch, "n": x.numel(), "u": u},
                "cases": [key] + ([inplace[key]] if key in inplace else []),
                "input_hash": results[key].get("input_hash"),
                "worst_x": float(x[worst]) if x.numel() else None,
                "abs_err_max": fmax(abs_err(out, ref)),
            }
        )
    return ms


def signature(contract, measurements):
    if not measurements:
        return {"pattern": None}
    e = max(m["names"]["e"] for m in measurements)
    abs_max = max(m["abs_err_max"] for m in measurements)
    inplace = max(m["names"]["inplace_mismatch"] for m in measurements)
    worst = max(measurements, key=lambda m: m["names"]["e"]).get("worst_x")
    bound = float(contract.bound.evaluate(dict(measurements[0]["names"])))
    if e > bound and 1e-5 < abs_max < 1e-3:
        pattern = "tanh_approximation"  # the tanh form's signature: <= ~2e-4 absolute, worst near |x| ~ 2
    elif e > bound:
        pattern = "error_above_bound"
    elif inplace:
        pattern = "inplace_differs"
    else:
        pattern = None
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "e_max": e,
        "abs_err_max": abs_max,
        "worst_x": worst,
        "inplace_mismatch": inplace,
    }


def naive_args(contract, trial):
    return (3.0 * randn((64 * 1024,), generator("cmp01-gelu-naive", trial)),)


def naive_check(impl, reference, trial, contract=None):
    """allclose(1e-2, 1e-2) of an out-of-place call on fresh buffers (what a benchmark checks)."""
    (x,) = naive_args(contract, trial)
    want, got = torch.empty_like(x), torch.empty_like(x)
    reference(x.clone(), want)
    try:
        impl(x.clone(), got)
    except Exception:  # noqa: BLE001 - a fixture that raises fails the functional check
        return False
    return bool(torch.allclose(got, want, atol=1e-2, rtol=1e-2))
