"""C-CMP-03 for causal attention masks (docs/contracts.md#causal-attention-masks):
``causal_attention(q[B,T,d], k[B,S,d], v[B,S,d]) -> [B,T,d]``, softmax(q k^T / sqrt d) v where query t (aligned to
the end of the keys: it sees keys 0 .. t + S - T, the FlashAttention >= 2.1 convention; S >= T) never attends to a
later key, for every shape — tails that are not a multiple of any tile included.

Two statistics. ``leak`` (T0): for each case a partner with every key and value after a split point j replaced by
other values; the queries that may not see position j (t + S - T < j) must give the same bits. A mask that is off
by one, applied only inside the diagonal tile, or skipped in a tail tile changes them. ``err`` (T2):
``max |out - ref| / (u * max|v|)`` against the fp64 masked oracle, within ``16 + sqrt(S)`` (calibrated:
fixed-order and stock implementations stay below a few tens)."""

from __future__ import annotations

import math

import torch

from .base import Case, abs_err, fmax, generator, point_label, randn, seed_meta, sweep_points


def oracle(q, k, v):
    q64, k64, v64 = q.double(), k.double(), v.double()
    T, S = q.shape[1], k.shape[1]
    s = q64 @ k64.transpose(1, 2) / math.sqrt(q.shape[-1])
    future = torch.arange(S)[None, :] > torch.arange(T)[:, None] + (S - T)
    s = s.masked_fill(future, float("-inf"))
    return torch.softmax(s, -1) @ v64


def inputs(p, g):
    B, T, S, d = p["B"], p["T"], p["S"], p["d"]
    q, k, v = randn((B, T, d), g), randn((B, S, d), g), randn((B, S, d), g)
    if p["value"] == "peaked":  # each query's most similar key is its own diagonal one: masks matter most
        k[:, S - T :] += 2.0 * q
    return q, k, v


def cases(contract, seeds):
    out = []
    for seed, klass in seeds:
        defaults = {"B": 2, "T": 64, "S": 64, "d": 32, "value": "gauss"}
        for i, p in enumerate(sweep_points(contract, seed, defaults)):
            p = dict(p, S=max(p["S"], p["T"]))  # S >= T (a query always sees at least its own key)
            g = generator("cmp03-causal", seed, i, p["T"], p["S"], p["d"], p["value"])
            q, k, v = inputs(p, g)
            key = f"s{seed}/p{i}/B{p['B']}T{p['T']}S{p['S']}d{p['d']}/{p['value']}"
            meta = seed_meta(seed, klass, **point_label(p))
            shape = (p["B"], p["T"], p["d"])
            out.append(Case(key, [q, k, v], expect_shape=shape, meta=meta))
            # the future-change partner: keys/values from split point j on replaced (j drawn from the seed)
            j = int(torch.randint(1, p["S"], (1,), generator=g)) if p["S"] > 1 else 1
            k2, v2 = k.clone(), v.clone()
            k2[:, j:] = randn(k2[:, j:].shape, g) * 3.0
            v2[:, j:] = randn(v2[:, j:].shape, g) * 3.0
            out.append(
                Case(
                    f"{key}/future{j}",
                    [q, k2, v2],
                    expect_shape=shape,
                    meta=dict(meta, future_of=key, split=j, no_sensitivity=True),
                )
            )
    return out


def perturb(case):
    q, k, v = case.args
    q2 = q.clone()
    q2[0, -1] += 1.0
    return Case(case.key, [q2, k, v], expect_shape=case.expect_shape, meta=dict(case.meta))


def _out(results, key, case):
    r = results.get(key)
    if not r or not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(case.expect_shape):
        return None
    return r["outputs"][0]


def _leak(out, out2, T, S, j):
    """Queries that cannot see position j (t + S - T < j) whose output bits changed."""
    blind = max(0, min(T, j - (S - T)))
    if blind == 0:
        return 0
    if out2 is None:
        return blind
    a, b = out[:, :blind].contiguous(), out2[:, :blind].contiguous()
    return int((a.view(torch.int32) != b.view(torch.int32)).any(-1).any(0).sum())


def measure(contract, cases, results):
    u = contract.unit_roundoff
    partner = {c.meta["future_of"]: k for k, c in cases.items() if c.meta.get("future_of")}
    ms = []
    for key, c in cases.items():
        if c.meta.get("future_of") or c.meta.get("sensitivity_of"):
            continue
        out = _out(results, key, c)
        if out is None:
            continue
        q, k, v = c.args
        T, S = q.shape[1], k.shape[1]
        err = abs_err(out, oracle(q, k, v)) / (u * max(float(v.abs().max()), 1e-30))
        k2 = partner.get(key)
        leak = T
        if k2 is not None:
            leak = _leak(out, _out(results, k2, cases[k2]), T, S, cases[k2].meta["split"])
        ms.append(
            {
                "point": c.meta["point"],
                "seed": c.meta["seed"],
                "seed_class": c.meta["seed_class"],
                "names": {"err": fmax(err), "leak": leak, "S": S, "T": T, "u": u},
                "cases": [key] + ([k2] if k2 else []),
                "input_hash": results[key].get("input_hash"),
            }
        )
    return ms


def signature(contract, measurements):
    if not measurements:
        return {"pattern": None}
    leaks = [m for m in measurements if m["names"]["leak"]]
    bad = [m for m in measurements if m["names"]["err"] > float(contract.bound.evaluate(dict(m["names"])))]
    if leaks:
        tile_multiple = all(m["names"]["T"] % 16 and m["names"]["S"] % 16 for m in leaks)
        pattern = "tail_mask_error" if tile_multiple else "future_attended"
    elif bad:
        pattern = "error_above_bound"
    else:
        pattern = None
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "leaking_shapes": sorted({(m["names"]["T"], m["names"]["S"]) for m in leaks})[:8],
        "err_max": max(m["names"]["err"] for m in measurements),
    }


def naive_args(contract, trial):
    g = generator("cmp03-causal-naive", trial)
    return (randn((8, 16, 32), g), randn((8, 16, 32), g), randn((8, 16, 32), g))
