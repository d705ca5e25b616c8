"""C-PRC-01 — accumulator and operand precision (docs/contract-language.md#the-twelve-classes): identity probes
bit-exact, and rho_ij = |C - C64|_ij / (u32 * ||a_i o b_j||_2) within the bound (4*sqrt(K) in the shipped
contract)."""

from __future__ import annotations

import math

import torch

from .base import (
    U32,
    Case,
    abs_err,
    domain_values,
    fmax,
    generator,
    loglog_slope,
    point_label,
    randn,
    seed_meta,
    sweep_points,
)


PROBE_K = 64


def cases(contract, seeds):
    trials = int(contract.protocol_params["trials"])
    out = []
    for seed, klass in seeds:
        # directed probes: A @ I == A, I @ B == B (bit-exact under any order), entries 1 + k*2**-12
        g = generator("prc01-probe", seed)
        M = N = 32
        K0 = PROBE_K
        a = randn((M, K0), g)
        b = randn((K0, N), g)
        k = torch.randint(1, 8, (M, K0), generator=g).float()
        a12 = (1.0 + k * 2.0**-12) * torch.sign(randn((M, K0), g))
        for name, x, y, expect in (
            ("A@I", a, torch.eye(K0), (M, K0)),
            ("I@B", torch.eye(K0), b, (K0, N)),
            ("A12@I", a12, torch.eye(K0), (M, K0)),
        ):
            out.append(
                Case(
                    f"s{seed}/probe/{name}",
                    [x, y],
                    expect_shape=expect,
                    meta=dict(seed_meta(seed, klass, probe=name, K=K0), probe=name, no_sensitivity=True),
                )
            )
        for i, p in enumerate(sweep_points(contract, seed, {"M": 32, "K": 64, "N": 32, "value": "gauss"})):
            M, K, N = p["M"], p["K"], p["N"]
            for t in range(trials):
                g = generator("prc01", seed, i, M, K, N, t)
                out.append(
                    Case(
                        f"s{seed}/p{i}/M{M}K{K}N{N}/t{t}",
                        [domain_values(randn((M, K), g), p["value"], g), randn((K, N), g)],
                        expect_shape=(M, N),
                        meta=seed_meta(seed, klass, **point_label(p), trial=t),
                    )
                )
    return out


def perturb(case):
    if "probe" in case.meta:
        return None
    a, b = case.args
    a2 = a.clone()
    a2[0, 0] = a2[0, 0] + 1.0
    return Case(case.key, [a2, b], expect_shape=case.expect_shape, meta=dict(case.meta))


def rho(a, b, out):
    a64, b64 = a.double(), b.double()
    ref = a64 @ b64
    den = torch.sqrt((a64 * a64) @ (b64 * b64)).clamp_min(1e-300)
    return fmax(abs_err(out, ref) / (U32 * den))


def measure(contract, cases, results):
    u = contract.unit_roundoff
    ms = []
    for key, c in cases.items():
        r = results[key]
        if not r["outputs"] or r["exception"]:
            continue
        out = r["outputs"][0]
        if tuple(out.shape) != tuple(c.expect_shape):
            continue
        a, b = c.args
        if "probe" in c.meta:
            expect = a if c.meta["probe"] != "I@B" else b
            mism = (
                int((out.contiguous().view(torch.int32) != expect.contiguous().view(torch.int32)).sum())
                if out.dtype == torch.float32
                else out.numel()
            )
            names = {
                "rho": 0.0,
                "probe_mismatch": mism,
                "K": c.meta["point"]["K"],
                "M": a.shape[0],
                "N": b.shape[1],
                "u": u,
            }
        else:
            names = {
                "rho": rho(a, b, out),
                "probe_mismatch": 0,
                "K": a.shape[1],
                "M": a.shape[0],
                "N": b.shape[1],
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
    by_k = {}
    probes = {}
    for m in measurements:
        p = m["point"]
        if "probe" in p:
            probes[p["probe"]] = probes.get(p["probe"], 0) + m["names"]["probe_mismatch"]
        else:
            by_k[p["K"]] = max(by_k.get(p["K"], 0.0), m["names"]["rho"])
    ks = sorted(by_k)
    slope = loglog_slope(ks, [by_k[k] for k in ks])
    env = next((dict(m["names"]) for m in measurements if "probe" not in m["point"]), {})
    bound_ok = all(by_k[k] <= contract.bound.evaluate(dict(env, K=k)) for k in ks)
    pattern, diagnosis = None, None
    if not bound_ok and slope is not None:
        if slope < 0.25:
            pattern = "rho_flat_in_K"
            worst = max(by_k.values())
            p_bits = 24 - math.log2(worst / math.sqrt(2)) if worst > 0 and math.isfinite(worst) else None
            diagnosis = f"effective operand mantissa ~{p_bits:.1f} bits" if p_bits else None
        else:
            pattern = "rho_grows_with_K"
    elif any(probes.values()):
        pattern = "probe_inexact"
    return {
        "pattern": pattern,
        "diagnosis": diagnosis,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "rho_max_by_K": {str(k): by_k[k] for k in ks},
        "rho_loglog_slope": slope,
        "probe_mismatches": probes,
        "probes_exact": not any(probes.values()),
    }


def naive_args(contract, trial):
    """nn.Linear-scaled B (randn/sqrt(K)) at one benchmark shape, the way KernelBench-style checks run."""
    g = generator("prc01-naive", trial)
    K = 256
    return (randn((128, K), g), randn((K, 128), g) / math.sqrt(K))
