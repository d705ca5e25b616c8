"""C-PRC-03 — denormal declaration (docs/contract-language.md#the-twelve-classes), PRESERVE: an elementwise fp32
product equals fl(x*w) computed in fp64 and rounded to fp32 with gradual underflow, bit for bit, on a subnormal ladder
and on normal x normal products that land in the subnormal range."""

from __future__ import annotations

import torch

from .base import Case, bits, ftz_enabled, generator, point_label, seed_meta, sweep_points


def _inputs(seed):
    g = generator("prc03", seed)
    # ladder: 1.5 * 2**e, e = -149..-126 (built in fp64, rounded once to fp32), times 0.75
    ladder = torch.tensor([1.5 * 2.0**e for e in range(-149, -125)], dtype=torch.float64).float()
    lw = torch.full_like(ladder, 0.75)
    # normal x normal products landing in the subnormal range: 2**-64 * 2**-70 scale
    n = 256
    a = ((1 + torch.rand(n, generator=g, dtype=torch.float64)) * 2.0**-64).float()
    b = (
        (1 + torch.rand(n, generator=g, dtype=torch.float64)) * 2.0 ** (-70 - torch.randint(0, 14, (n,), generator=g))
    ).float()
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    # DAZ probe: subnormal input times a large weight gives a normal output unless inputs are flushed
    daz_x = torch.tensor([1.5 * 2.0**e for e in range(-146, -127, 3)], dtype=torch.float64).float()
    daz_w = torch.full_like(daz_x, 2.0**40)
    # ordinary values: the op must still be an exact fp32 product
    nx = torch.randn(64, generator=g)
    nw = torch.randn(64, generator=g)
    x = torch.cat([ladder, a * sign, daz_x, nx])
    w = torch.cat([lw, b, daz_w, nw])
    kinds = ["ladder"] * len(ladder) + ["normal_to_subnormal"] * n + ["daz_probe"] * len(daz_x) + ["normal"] * 64
    return x, w, kinds


TAIL = 32  # scattered_subnormals_to_the_end: the last positions, all subnormal-producing pairs


def _scattered(seed, i, n, to_the_end=False):
    """A large tensor of ordinary products with subnormal-producing pairs (normal x normal -> subnormal) and DAZ
    probes (subnormal x 2**40) at positions drawn from the seed, so a kernel cannot guess where they are. With
    ``to_the_end`` (value ``scattered_subnormals_to_the_end``, v0.4.0) the last :data:`TAIL` positions hold
    subnormal-producing pairs too: a vector loop's scalar tail (its last n % width elements) meets them whatever n
    the seed drew, where random positions reach it on some seeds only."""
    g = generator("prc03-scattered", seed, i, n)
    x = torch.randn(n, generator=g)
    w = torch.randn(n, generator=g)
    drawn = torch.randint(0, n, (max(1, n // 64),), generator=g)
    if to_the_end:
        drawn = torch.cat([drawn, torch.arange(max(0, n - TAIL), n)])
    pos = torch.unique(drawn)  # distinct: assignment order-free
    k = pos.numel()
    a = ((1 + torch.rand(k, generator=g, dtype=torch.float64)) * 2.0**-64).float()
    b = (
        (1 + torch.rand(k, generator=g, dtype=torch.float64)) * 2.0 ** (-70 - torch.randint(0, 14, (k,), generator=g))
    ).float()
    x[pos], w[pos] = a, b
    dpos = torch.unique(torch.randint(0, n, (max(1, n // 1024),), generator=g))
    kd = dpos.numel()
    x[dpos] = (1.5 * 2.0**-140) * torch.ones(kd)
    w[dpos] = 2.0**40
    kinds = torch.zeros(n, dtype=torch.int8)  # 0 normal, 1 normal_to_subnormal, 2 daz_probe
    kinds[pos] = 1
    kinds[dpos] = 2
    return x, w, kinds


def cases(contract, seeds):
    out = []
    for seed, klass in seeds:
        x, w, kinds = _inputs(seed)
        out.append(
            Case(
                f"s{seed}/ladder",
                [x, w],
                expect_shape=tuple(x.shape),
                meta=dict(
                    seed_meta(seed, klass, probe="subnormal_ladder", value="subnormal_ladder", n=int(x.numel())),
                    kinds=kinds,
                ),
            )
        )
        if not contract.protocol_params.get("sweep"):
            continue
        for i, p in enumerate(sweep_points(contract, seed, {"n": 4096, "value": "scattered_subnormals"})):
            if p["value"] not in ("scattered_subnormals", "scattered_subnormals_to_the_end"):
                continue
            xs, ws, ks = _scattered(seed, i, int(p["n"]), p["value"] == "scattered_subnormals_to_the_end")
            out.append(
                Case(
                    f"s{seed}/p{i}/n{p['n']}",
                    [xs, ws],
                    expect_shape=(int(p["n"]),),
                    meta=dict(seed_meta(seed, klass, **point_label(p)), kind_codes=ks, no_sensitivity=True),
                )
            )
    return out


def perturb(case):
    x, w = case.args
    return Case(case.key, [x * 2.0, w], expect_shape=case.expect_shape, meta=dict(case.meta))


def oracle(x, w):
    if ftz_enabled():  # the oracle needs gradual underflow; refuse to measure with flushing on
        raise RuntimeError("oracle process has FTZ/DAZ enabled; cannot compute the PRESERVE oracle")
    return (x.double() * w.double()).float()


def measure(contract, cases, results):
    ms = []
    tiny = torch.finfo(torch.float32).tiny
    for key, c in cases.items():
        r = results[key]
        if not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(c.expect_shape):
            continue
        out = r["outputs"][0]
        if out.dtype != torch.float32:
            continue
        x, w = c.args
        ref = oracle(x, w)
        sub = (ref != 0) & (ref.abs() < tiny)
        mism = int((bits(out) != bits(ref)).sum())
        flushed = int(((out == 0) & sub).sum())
        kinds = c.meta.get("kinds") or []
        if c.meta.get("kind_codes") is not None:
            daz_mask = c.meta["kind_codes"] == 2
        else:
            daz_mask = torch.tensor([k == "daz_probe" for k in kinds]) if kinds else torch.zeros_like(sub)
        names = {"mismatch": mism, "flush_ratio": flushed / max(int(sub.sum()), 1), "n_subnormal": int(sub.sum())}
        m = {
            "point": c.meta["point"],
            "seed": c.meta["seed"],
            "seed_class": c.meta["seed_class"],
            "names": names,
            "cases": [key],
            "input_hash": r.get("input_hash"),
            "daz_flushed": int(((out == 0) & daz_mask & (ref != 0)).sum()),
            "daz_probes": int(daz_mask.sum()),
        }
        ms.append(m)
    return ms


def signature(contract, measurements):
    if not measurements:
        return {"pattern": None}
    m = max(measurements, key=lambda m: m["names"]["mismatch"])
    pattern = None
    if m["daz_flushed"]:
        pattern = "inputs_flushed"
    elif m["names"]["flush_ratio"] > 0:
        pattern = "outputs_flushed"
    elif m["names"]["mismatch"]:
        pattern = "inexact"
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "flush_ratio": m["names"]["flush_ratio"],
        "subnormal_oracle_outputs": m["names"]["n_subnormal"],
        "flushed_outputs": round(m["names"]["flush_ratio"] * m["names"]["n_subnormal"]),
        "daz_probe_flushed": f"{m['daz_flushed']}/{m['daz_probes']}",
        "mismatch": m["names"]["mismatch"],
    }


def naive_args(contract, trial):
    g = generator("prc03-naive", trial)
    return (torch.randn(4096, generator=g), torch.randn(4096, generator=g))
