"""C-CMP-03 — shape-polymorphism preservation (docs/contract-language.md#the-twelve-classes): softmax error <= 1e-6
against fp64 for every shape in a boundary sweep (1, 7, 15, 16, 17, 127, 1000, 1023, 1024, 1025, 4099), non-contiguous
inputs and a rank-3 shape."""

from __future__ import annotations

import torch

from .base import Case, abs_err, domain_values, fmax, generator, lay_out, point_label, randn, seed_meta, sweep_points


def _values(x, value, g):
    """gauss2 as is; large_logits: logits of magnitude 100..1000 (exp overflows fp32 above ~88.7) with the
    largest ones at positions drawn from the seed, and a negative-offset row (exp underflows without the max)."""
    if value != "large_logits":
        return domain_values(x, value, g)
    rows = x.shape[-2]
    scale = 10.0 ** (2 + torch.rand((rows, 1), generator=g, dtype=torch.float64))
    x = (x.double() * 0.05 + 1.0) * scale
    if rows > 1:
        x[1::2] = -x[1::2]
    return x.float()


def cases(contract, seeds):
    old_style = not contract.protocol_params.get("sweep")
    out = []
    for seed, klass in seeds:
        for i, p in enumerate(
            sweep_points(contract, seed, {"N": 1000, "rows": 4, "value": "gauss2", "layout": "contiguous"})
        ):
            N, rows, value, layout = p["N"], p["rows"], p["value"], p["layout"]
            g = (
                generator("cmp03", seed, N)
                if old_style or (rows, value, layout) == (4, "gauss2", "contiguous")
                else generator("cmp03", seed, i, N, rows, value, layout)
            )
            x = _values(2.0 * randn((rows, N), g), value, g)
            if old_style or layout == "contiguous":
                out.append(
                    Case(
                        f"s{seed}/p{i}/N{N}x{rows}/{value}",
                        [x],
                        expect_shape=(rows, N),
                        meta=seed_meta(seed, klass, **point_label(dict(p, layout="contiguous"))),
                    )
                )
            if (old_style and N in (17, 1000, 1025)) or layout == "transposed":
                xt = _values(2.0 * randn((N, rows), g).t(), value, g).t().contiguous().t()  # non-contiguous view
                out.append(
                    Case(
                        f"s{seed}/p{i}/N{N}x{rows}/{value}/transposed",
                        [xt],
                        expect_shape=(rows, N),
                        meta=dict(
                            seed_meta(seed, klass, **point_label(dict(p, layout="transposed"))), no_sensitivity=True
                        ),
                    )
                )
            if layout in ("padded_rows", "offset"):  # issue #24: padded row strides, a misaligned start
                out.append(
                    Case(
                        f"s{seed}/p{i}/N{N}x{rows}/{value}/{layout}",
                        [lay_out(x, layout, g)],
                        expect_shape=(rows, N),
                        meta=dict(seed_meta(seed, klass, **point_label(p)), no_sensitivity=True),
                    )
                )
        g = generator("cmp03-rank3", seed)
        x3 = 2.0 * randn((2, 3, 33), g)
        out.append(
            Case(
                f"s{seed}/rank3",
                [x3],
                expect_shape=(2, 3, 33),
                meta=dict(seed_meta(seed, klass, N=33, layout="rank3", value="gauss2"), no_sensitivity=True),
            )
        )
    return out


def perturb(case):
    x = case.args[0].clone()
    if x.shape[-1] < 2:  # softmax of one element is 1 whatever the input: pick a wider case
        return None
    x[..., 0] += 1.0
    return Case(case.key, [x], expect_shape=case.expect_shape, meta=dict(case.meta))


def measure(contract, cases, results):
    ms = []
    for key, c in cases.items():
        r = results[key]
        if not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(c.expect_shape):
            continue
        x = c.args[0]
        ref = torch.softmax(x.double(), -1)
        names = {"err": fmax(abs_err(r["outputs"][0], ref)), "N": x.shape[-1], "u": contract.unit_roundoff}
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
    fail_pts = [
        m["point"]
        for m in measurements
        if not contract.relation.holds(dict(m["names"], bound=contract.bound.evaluate(m["names"])))
    ]
    pass_pts = [m["point"] for m in measurements if m["point"] not in fail_pts]
    pattern = None
    if fail_pts:
        fail_ns = {p["N"] for p in fail_pts}
        if all(n % 16 for n in fail_ns) and any(p["N"] % 16 == 0 for p in pass_pts):
            pattern = "tail_failure"
        elif all(p["layout"] != "contiguous" for p in fail_pts):
            pattern = "layout_failure"
        else:
            pattern = "shape_failure"
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "failing_shapes": sorted({f"N={p['N']}/{p['layout']}" for p in fail_pts}),
        "failing_fraction": len(fail_pts) / max(len(measurements), 1),
    }


def naive_args(contract, trial):
    g = generator("cmp03-naive", trial)
    return (2.0 * randn((64, 1024), g),)
