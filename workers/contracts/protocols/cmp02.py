"""C-CMP-02 — autotune / schedule invariance (docs/contract-language.md#the-twelve-classes): every config the
implementation exposes in ``impl.configs`` (forced one by one) and its own automatic choice satisfy C-PRC-01's bound,
at shapes that steer a tuner to different choices (small and large M)."""

from __future__ import annotations

from .base import Case, domain_values, generator, point_label, randn, seed_meta, sweep_points
from .prc01 import rho


def cases(contract, seeds):
    trials = int(contract.protocol_params["trials"])
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(sweep_points(contract, seed, {"M": 16, "K": 256, "N": 64, "value": "gauss"})):
            M, K, N = p["M"], p["K"], p["N"]
            for t in range(trials):
                g = generator("cmp02", seed, M, K, t) if N == 64 else generator("cmp02", seed, i, M, K, N, t)
                out.append(
                    Case(
                        f"s{seed}/p{i}/M{M}K{K}N{N}/t{t}",
                        [domain_values(randn((M, K), g), p["value"], g), randn((K, N), g)],
                        expect_shape=(M, N),
                        all_configs=True,
                        meta=seed_meta(seed, klass, **point_label(p), trial=t),
                    )
                )
    return out


def perturb(case):
    a, b = case.args
    a2 = a.clone()
    a2[0, 0] += 1.0
    return Case(case.key, [a2, b], expect_shape=case.expect_shape, all_configs=True, meta=dict(case.meta))


def measure(contract, cases, results):
    u = contract.unit_roundoff
    ms = []
    for key, c in cases.items():
        if c.meta.get("sensitivity_of"):
            continue
        r = results[key]
        if r["exception"] or not r.get("configs"):
            continue
        a, b = c.args
        hashes = set()
        for cfg in r["configs"]:
            if not cfg["outputs"] or tuple(cfg["outputs"][0].shape) != tuple(c.expect_shape):
                continue
            out = cfg["outputs"][0]
            hashes.add(cfg["hashes"][0])
            names = {"rho": rho(a, b, out), "K": a.shape[1], "M": a.shape[0], "u": u}
            ms.append(
                {
                    "point": dict(c.meta["point"], config=cfg["config"]),
                    "seed": c.meta["seed"],
                    "seed_class": c.meta["seed_class"],
                    "names": names,
                    "cases": [key],
                    "input_hash": r.get("input_hash"),
                    "config": cfg["config"],
                }
            )
        for m in ms:
            if m["cases"] == [key]:
                m["distinct_outputs"] = len(hashes)
    return ms


def signature(contract, measurements):
    table = {}
    for m in measurements:
        k = f"{m['config']}@M{m['names']['M']}"
        table[k] = max(table.get(k, 0.0), m["names"]["rho"])
    bad = [
        m
        for m in measurements
        if not contract.relation.holds(dict(m["names"], bound=contract.bound.evaluate(m["names"])))
    ]
    pattern = None
    if bad:
        forced_bad = {m["config"] for m in bad if m["config"] != "auto"}
        auto_bad_ms = {m["names"]["M"] for m in bad if m["config"] == "auto"}
        auto_ms = {m["names"]["M"] for m in measurements if m["config"] == "auto"}
        pattern = "shape_dependent_choice" if auto_bad_ms and auto_bad_ms != auto_ms else "config_dependent_error"
        if not forced_bad and not auto_bad_ms:
            pattern = "config_dependent_error"
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "rho_max_by_config_and_M": table,
        "configs": sorted({m["config"] for m in measurements}),
        "distinct_outputs_across_configs": max((m.get("distinct_outputs", 1) for m in measurements), default=0),
    }


def naive_args(contract, trial):
    """One benchmark shape (M = 128) and the implementation's own choice of config."""
    g = generator("cmp02-naive", trial)
    return (randn((128, 256), g), randn((256, 64), g) / 16.0)
