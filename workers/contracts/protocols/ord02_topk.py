"""C-ORD-02 for top-k with ties (docs/contracts.md#top-k-with-ties): ``topk(x[R,N], k) -> indices[R,k]`` (int64,
the k largest, in descending order of value), with the declared ``policies.tie_break``: LOWEST_INDEX (among equal
values the lower index comes first, and is the one kept at the k-th place) or HIGHEST_INDEX. The values are exact
by construction (the parent gathers them from its own copy of x); every index must be what the declared rule gives,
on inputs full of ties (values from a handful of levels), bit for bit, on every launch.

Statistic ``mismatch`` = rows whose indices differ from the rule's (a stable sort in the parent); also bound:
``value_mismatch`` = rows whose gathered values are not the k largest (a wrong selection, not only a wrong order)."""

from __future__ import annotations

import torch

from .base import Case, generator, point_label, randn, seed_meta, sweep_points


def values(kind, rows, n, g):
    """``few_levels``: integers 0..7 (every row full of ties, ties across the k-th place); ``gauss``: N(0, 1)
    (ties only by chance); ``tied_blocks``: N(0,1) rounded to 1/4 with whole runs equal (ties across tiles)."""
    if kind == "few_levels":
        return torch.randint(0, 8, (rows, n), generator=g).float()
    x = randn((rows, n), g)
    if kind == "tied_blocks":
        x = torch.round(x * 4) / 4
        x = x.repeat_interleave(16, dim=1)[:, :n]
    return x


def oracle(x: torch.Tensor, k: int, rule: str) -> torch.Tensor:
    """Indices of the k largest, descending, ties resolved by the declared rule (a stable sort)."""
    if rule == "HIGHEST_INDEX":
        flipped = torch.flip(x, [-1])
        idx = torch.sort(flipped, dim=-1, descending=True, stable=True).indices[:, :k]
        return x.shape[-1] - 1 - idx
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :k]


def cases(contract, seeds):
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(sweep_points(contract, seed, {"N": 1024, "k": 16, "rows": 16, "value": "few_levels"})):
            k = min(p["k"], p["N"])
            x = values(p["value"], p["rows"], p["N"], generator("ord02-topk", seed, i, p["N"], p["value"]))
            out.append(
                Case(
                    f"s{seed}/p{i}/{p['rows']}x{p['N']}/k{k}/{p['value']}",
                    [x, k],
                    expect_shape=(p["rows"], k),
                    expect_dtype=torch.int64,
                    meta=seed_meta(seed, klass, **dict(point_label(p), k=k)),
                )
            )
    return out


def perturb(case):
    x, k = case.args
    x2 = x.clone()
    x2[0, -1] = x2[0].max() + 1.0  # a new strict maximum in the last column: row 0 must now start with it
    return Case(case.key, [x2, k], expect_shape=case.expect_shape, expect_dtype=torch.int64, meta=dict(case.meta))


def measure(contract, cases, results):
    rule = contract.policies.get("tie_break", "LOWEST_INDEX")
    ms = []
    for key, c in cases.items():
        if c.meta.get("sensitivity_of"):
            continue
        r = results[key]
        out = r["outputs"][0] if r["outputs"] else None
        if out is None or r["exception"] or tuple(out.shape) != tuple(c.expect_shape) or out.dtype != torch.int64:
            continue
        x, k = c.args
        want = oracle(x, k, rule)
        n = x.shape[1]
        valid = ((out >= 0) & (out < n)).all(-1)
        got_vals = torch.gather(x, 1, out.clamp(0, n - 1))
        want_vals = torch.gather(x, 1, want)
        # values compared as numbers: -0.0 and +0.0 are a tie (which of them comes first is the tie order's business)
        value_rows = (~valid) | (got_vals != want_vals).any(-1)
        index_rows = (out != want).any(-1)
        ms.append(
            {
                "point": c.meta["point"],
                "seed": c.meta["seed"],
                "seed_class": c.meta["seed_class"],
                "names": {
                    "mismatch": int(index_rows.sum()),
                    "value_mismatch": int(value_rows.sum()),
                    "R": x.shape[0],
                    "N": n,
                    "k": k,
                },
                "cases": [key],
                "input_hash": r.get("input_hash"),
            }
        )
    return ms


def signature(contract, measurements):
    idx = sum(m["names"]["mismatch"] for m in measurements)
    val = sum(m["names"]["value_mismatch"] for m in measurements)
    pattern = "wrong_selection" if val else ("tie_order_violated" if idx else None)
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "rows_with_wrong_indices": idx,
        "rows_with_wrong_values": val,
    }


def naive_args(contract, trial):
    return (randn((64, 1024), generator("ord02-topk-naive", trial)), 16)


def naive_check(impl, reference, trial, contract=None):
    """What a benchmark checks: the *values* at the returned indices, allclose to the reference's."""
    x, k = naive_args(contract, trial)
    try:
        got = impl(x.clone(), k)
        vals = torch.gather(x, 1, got)
    except Exception:  # noqa: BLE001 - a fixture that raises (or returns bad indices) fails the functional check
        return False
    want = torch.gather(x, 1, reference(x.clone(), k))
    return bool(torch.allclose(vals, want, atol=1e-2, rtol=1e-2))
