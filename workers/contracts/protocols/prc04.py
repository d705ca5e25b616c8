"""C-PRC-04 — mixed-precision scaling invariance (docs/contract-language.md#the-twelve-classes): f(s*x)/s == f(x)
bit-exactly for s = 2**k, and the error against the fp64 oracle within C-PRC-01's bound at every scale."""

from __future__ import annotations

import math

import torch

from .base import U32, Case, abs_err, bits, fmax, generator, point_label, randn, seed_meta, sweep_points


def _xw(seed, t, M=128, K=64, N=128):
    g = generator("prc04", seed, t) if (M, K, N) == (128, 64, 128) else generator("prc04", seed, t, M, K, N)
    x = randn((M, K), g)
    bound = 1.0 / math.sqrt(K)  # nn.Linear initialisation
    w = ((torch.rand((K, N), generator=g, dtype=torch.float64) * 2 - 1) * bound).float()
    return x, w


def cases(contract, seeds):
    trials = int(contract.protocol_params["trials"])
    out = []
    defaults = {"M": 128, "K": 64, "N": 128, "k": 8, "value": "linear_init"}
    for seed, klass in seeds:
        points = sweep_points(contract, seed, defaults)
        shapes = list(dict.fromkeys((p["M"], p["K"], p["N"]) for p in points))
        for t in range(trials):
            for M, K, N in shapes:
                x, w = _xw(seed, t, M, K, N)
                base = f"s{seed}/t{t}/M{M}K{K}N{N}"
                out.append(
                    Case(
                        f"{base}/k0",
                        [x, w],
                        expect_shape=(M, N),
                        meta=seed_meta(seed, klass, M=M, K=K, N=N, k=0, value="linear_init", trial=t),
                    )
                )
                for k in dict.fromkeys(p["k"] for p in points if (p["M"], p["K"], p["N"]) == (M, K, N)):
                    p = next(p for p in points if (p["M"], p["K"], p["N"], p["k"]) == (M, K, N, k))
                    out.append(
                        Case(
                            f"{base}/k{k}",
                            [x * 2.0**k, w],
                            expect_shape=(M, N),
                            meta=dict(
                                seed_meta(seed, klass, **point_label(p), trial=t),
                                base=f"{base}/k0",
                                no_sensitivity=True,
                            ),
                        )
                    )
    return out


def perturb(case):
    x, w = case.args
    x2 = x.clone()
    x2[0, 0] += 1.0
    return Case(case.key, [x2, w], expect_shape=case.expect_shape, meta=dict(case.meta))


def measure(contract, cases, results):
    u = contract.unit_roundoff
    ms = []
    for key, c in cases.items():
        if "base" not in c.meta:
            continue
        r, r0 = results[key], results[c.meta["base"]]
        if not r["outputs"] or not r0["outputs"] or r["exception"] or r0["exception"]:
            continue
        out, out0 = r["outputs"][0], r0["outputs"][0]
        if tuple(out.shape) != tuple(c.expect_shape) or tuple(out0.shape) != tuple(c.expect_shape):
            continue
        k = c.meta["point"]["k"]
        scaled_back = (out.double() / 2.0**k).to(out.dtype) if out.is_floating_point() else out
        mism = int((bits(scaled_back) != bits(out0)).sum()) if out.dtype == out0.dtype else out.numel()
        x0, w = cases[c.meta["base"]].args
        ref = x0.double() @ w.double()
        den = torch.sqrt((x0.double() ** 2) @ (w.double() ** 2)).clamp_min(1e-300)
        rho = fmax(abs_err(scaled_back.double(), ref) / (U32 * den))
        names = {"mismatch": mism, "rho": rho, "k": k, "K": x0.shape[1], "u": u}
        ms.append(
            {
                "point": c.meta["point"],
                "seed": c.meta["seed"],
                "seed_class": c.meta["seed_class"],
                "names": names,
                "cases": [key, c.meta["base"]],
                "input_hash": r.get("input_hash"),
                "nonfinite": int((~torch.isfinite(out)).sum()),
            }
        )
    return ms


def signature(contract, measurements):
    by_k = {}
    for m in measurements:
        k = m["names"]["k"]
        cur = by_k.setdefault(k, {"mismatch": 0, "rho": 0.0, "nonfinite": 0})
        cur["mismatch"] += m["names"]["mismatch"]
        cur["rho"] = max(cur["rho"], m["names"]["rho"])
        cur["nonfinite"] += m["nonfinite"]
    pattern = None
    if any(v["nonfinite"] for k, v in by_k.items() if k > 0):
        pattern = "overflow_at_scale"
    elif any(v["mismatch"] for k, v in by_k.items() if k < 0) and not any(
        v["mismatch"] for k, v in by_k.items() if k > 0
    ):
        pattern = "underflow_at_scale"
    elif any(v["mismatch"] for v in by_k.values()):
        pattern = "not_equivariant"
    elif any(
        not contract.relation.holds(dict(m["names"], bound=contract.bound.evaluate(m["names"]))) for m in measurements
    ):
        pattern = "error_above_bound"
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "by_scale_exponent": {str(k): by_k[k] for k in sorted(by_k)},
        "first_failing_k": next((k for k in sorted(by_k, key=abs) if by_k[k]["mismatch"]), None),
    }


def naive_args(contract, trial):
    return _xw(10_000 + trial, 0)
