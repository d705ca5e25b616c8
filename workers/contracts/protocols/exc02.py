"""C-EXC-02 — out-of-bounds access semantics (docs/contract-language.md#the-twelve-classes): the declared ``oob`` /
``negative_index`` policy holds on every OOB probe (RAISE: an exception), in-bound positions are exact (T0)."""

from __future__ import annotations

import torch

from .base import Case, generator, point_label, randn, seed_meta, sweep_points

PROBES = ("n", "n+7", "-1", "-n", "-n-1", "2**31-1", "-2**31", "2**40")


def _probe_value(name, n):
    return int(eval_probe(name, n))


def eval_probe(name, n):
    from ..expr import parse

    return parse(name).evaluate({"n": n})


def _probes_for(seed, i, count):
    import random

    if count is None or count >= len(PROBES):
        return list(PROBES)
    rng = random.Random(f"exc02-probes|{seed}|{i}")
    return ["n"] + rng.sample(PROBES[1:], max(0, count - 1))


def cases(contract, seeds):
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(
            sweep_points(contract, seed, {"n": 100, "d": 8, "m": 1000, "value": "oob_any_position", "probes": None})
        ):
            n, d, m = p["n"], p["d"], max(1, p["m"])
            g = generator("exc02", seed) if i == 0 else generator("exc02", seed, i, n, d, m)
            data = randn((n, d), g)
            idx = torch.randint(0, n, (m,), generator=g)
            label = point_label(p)
            tag = f"s{seed}/p{i}"
            out.append(
                Case(
                    f"{tag}/inbound",
                    [data, idx],
                    expect_shape=(m, d),
                    meta=dict(seed_meta(seed, klass, probe="inbound", **label), group=tag),
                )
            )
            for pr in _probes_for(seed, i, p.get("probes")):
                bad = idx.clone()
                pos = int(torch.randint(0, m, (1,), generator=g))  # anywhere in the index set
                bad[pos] = _probe_value(pr, n)
                out.append(
                    Case(
                        f"{tag}/oob/{pr}",
                        [data, bad],
                        expect_shape=(m, d),
                        expect_raise=True,
                        meta=dict(seed_meta(seed, klass, probe=pr, **label), pos=pos, no_sensitivity=True, group=tag),
                    )
                )
    return out


def perturb(case):
    data, idx = case.args
    return Case(case.key, [data + 1.0, idx], expect_shape=case.expect_shape, meta=dict(case.meta))


def expected_behaviour(policies, value, n):
    """What the declared policies say an index must do: ('raise',) or ('row', r) or ('zero',) or ('any',)."""
    if value < 0 and -n <= value and policies.get("negative_index") == "WRAP_PYTHON":
        return ("row", value + n)
    if 0 <= value < n:
        return ("row", value)
    oob = policies.get("oob", "RAISE")
    if value < 0 and policies.get("negative_index") == "ERROR" and oob != "UNDEFINED":
        return ("raise",)
    return {
        "RAISE": ("raise",),
        "ZERO": ("zero",),
        "CLAMP": ("row", min(max(value, 0), n - 1)),
        "WRAP": ("row", value % n),
        "UNDEFINED": ("any",),
    }[oob]


def measure(contract, cases, results):
    pol = contract.policies
    ms = []
    per_seed = {}
    for key, c in cases.items():
        r = results[key]
        data, idx = c.args
        n = data.shape[0]
        point = {k: v for k, v in c.meta["point"].items() if k != "probe"}
        s = per_seed.setdefault(
            c.meta.get("group", c.meta["seed"]),
            {
                "seed": c.meta["seed"],
                "seed_class": c.meta["seed_class"],
                "raise_deficit": 0,
                "inbound_mismatch": 0,
                "oob_mismatch": 0,
                "observed": {},
                "cases": [],
                "input_hash": r.get("input_hash"),
                "point": point,
            },
        )
        s["cases"].append(key)
        if c.meta.get("sensitivity_of"):
            continue
        if not c.expect_raise:
            if r["outputs"] and tuple(r["outputs"][0].shape) == tuple(c.expect_shape):
                s["inbound_mismatch"] += int((r["outputs"][0] != data[idx]).any(-1).sum())
            else:
                s["inbound_mismatch"] += idx.shape[0]
            continue
        probe, pos = c.meta["point"]["probe"], c.meta["pos"]
        exp = expected_behaviour(pol, int(idx[pos]), n)
        raised = r["exception"] is not None
        out = r["outputs"][0] if r["outputs"] else None
        observed = "raised" if raised else _classify(out, data, idx, pos)
        s["observed"][probe] = observed
        if exp[0] == "raise" and not raised:
            s["raise_deficit"] += 1
        elif exp[0] == "row" and (raised or out is None or not torch.equal(out[pos], data[exp[1]])):
            s["oob_mismatch"] += 1
        elif exp[0] == "zero" and (raised or out is None or bool((out[pos] != 0).any())):
            s["oob_mismatch"] += 1
    for s in per_seed.values():
        ms.append(
            {
                "point": dict(s["point"], probes=len(s["observed"])),
                "seed": s["seed"],
                "seed_class": s["seed_class"],
                "names": {k: s[k] for k in ("raise_deficit", "inbound_mismatch", "oob_mismatch")},
                "cases": s["cases"],
                "input_hash": s["input_hash"],
                "observed": s["observed"],
            }
        )
    return ms


def _classify(out, data, idx, pos):
    if out is None or out.dim() != 2 or out.shape[0] <= pos:
        return "bad_output"
    row = out[pos]
    n = data.shape[0]
    v = int(idx[pos])
    if bool((row == 0).all()):
        return "zero"
    if torch.equal(row, data[min(max(v, 0), n - 1)]):
        return "clamp"
    if torch.equal(row, data[v % n]):
        return "wrap"
    return "other"


def int32_offset(row: int, row_stride: int) -> int:
    """Offset row*row_stride in wrapping int32 arithmetic (the index-width clause, no allocation)."""
    v = (row * row_stride) & 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 31) else v


def signature(contract, measurements):
    probes = {}
    for m in measurements:
        for p, obs in m.get("observed", {}).items():
            probes.setdefault(p, {}).setdefault(obs, 0)
            probes[p][obs] += 1
    total = sum(sum(v.values()) for v in probes.values())
    raised = sum(v.get("raised", 0) for v in probes.values())
    kinds = {o for v in probes.values() for o in v if o != "raised"}
    pattern = None
    if raised < total and contract.policies.get("oob") == "RAISE":
        pattern = {"zero": "no_raise_zero_fill", "clamp": "no_raise_clamped", "wrap": "no_raise_wrapped"}.get(
            next(iter(kinds)) if len(kinds) == 1 else "", "no_raise_other"
        )
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "oob_probes": total,
        "raised": raised,
        "exception_deficit": total - raised,
        "observed": probes,
        "index_width_example": {
            "rows": 70000,
            "row_stride": 40000,
            "int32_offset_of_row_69999": int32_offset(69999, 40000),
        },
    }


def naive_args(contract, trial):
    g = generator("exc02-naive", trial)
    data = randn((100, 8), g)
    return (data, torch.randint(0, 100, (1000,), generator=g))
