"""C-ORD-03 for the ops inference engines need batch-invariant (docs/contracts.md#batch-invariance-of-rms_norm-layer-norm-softmax-attention-and-matmul):
``rms_norm``, ``layer_norm``, ``softmax``, ``attention`` and ``matmul``. One protocol module for the five ops (the
property and its measurement are the same; only the inputs differ), one protocol name per op
(``batch_invariance_<op>``, so the loader checks each contract's names and signature against its op).

A row (for attention: one sequence of the batch) computed alone must be bit-identical to the same row computed
inside a batch, for every batch size of the sweep and at every position the sampled rows take; the oracle is the
implementation's own batch-1 evaluation. What the sweep is built to catch: a reduction strategy chosen by batch size
(split-K / split-KV when the batch is too small to fill the machine, the common real cause) and tiles whose result
depends on which rows share them (a row tile's max, padding to a tile of rows)."""

from __future__ import annotations

import math

import torch

from .base import Case, Out, bits, generator, point_label, randn, seed_meta, sweep_points

ROW_SAMPLE = 8
OPS = ("rms_norm", "layer_norm", "softmax", "attention", "matmul")
# the dimensions of one op besides the batch b, with the defaults a point without them takes
DIMS = {
    "rms_norm": {"D": 1024},
    "layer_norm": {"D": 1024},
    "softmax": {"D": 1024},
    "matmul": {"K": 1024, "N": 256},
    "attention": {"T": 16, "S": 128, "d": 64},
}
DOMINANT = 30.0  # a dominant logit/entry, far above N(0, 4) but with exp(-DOMINANT) still a normal fp32


def op_of(contract) -> str:
    op = contract.protocol.removeprefix("batch_invariance_")
    if op not in OPS:
        raise ValueError(f"protocol {contract.protocol!r} names no op of {OPS}")
    return op


def _rows_to_check(seed, group, bmax):
    """Row 0, row 1 and the last row of the largest batch, plus rows drawn from the seed."""
    import random

    rng = random.Random(f"ord03-ops-rows|{seed}|{group}|{bmax}")
    rows = {0, min(1, bmax - 1), bmax - 1}
    while len(rows) < min(ROW_SAMPLE, bmax):
        rows.add(rng.randrange(bmax))
    return sorted(rows)


def _dominant(x, g):
    """One entry per row (at a position drawn per row, the last column included) raised to a dominant value."""
    rows, n = x.shape[0], x.shape[-1]
    pos = torch.randint(0, n, (rows,), generator=g)
    pos[-1] = n - 1
    x = x.clone()
    x.view(rows, -1)[torch.arange(rows), pos] += DOMINANT
    return x


def inputs(op, dims, bmax, g, value):
    """The full-batch inputs of one group; the batch dimension is the first of every tensor."""
    if op in ("rms_norm", "layer_norm", "softmax"):
        x = 2.0 * randn((bmax, dims["D"]), g)
        if op == "layer_norm":
            x = x + 3.0
        return [_dominant(x, g) if value == "dominant" else x]
    if op == "matmul":
        a = randn((bmax, dims["K"]), g)
        if value == "dominant":
            a = _dominant(a, g)
        return [a, randn((dims["K"], dims["N"]), g) / math.sqrt(dims["K"])]
    q = randn((bmax, dims["T"], dims["d"]), g)
    k, v = randn((bmax, dims["S"], dims["d"]), g), randn((bmax, dims["S"], dims["d"]), g)
    if value == "dominant":  # one key much closer to the queries: a peaked attention row
        k[:, -1] = q[:, 0] * 4.0
    return [q, k, v]


def call_args(op, full, lo, hi):
    """The arguments of one call on rows [lo, hi) (batched tensors sliced and copied; matmul's b shared)."""
    if op == "matmul":
        return [full[0][lo:hi].clone(), full[1]], (hi - lo, full[1].shape[1])
    args = [t[lo:hi].clone() for t in full]
    shape = (hi - lo,) + tuple(full[0].shape[1:])
    if op == "rms_norm":
        args.append(Out(shape))
    return args, shape


def _groups(points, op):
    groups = {}
    for p in points:
        key = tuple((d, p[d]) for d in DIMS[op]) + (("value", p["value"]),)
        groups.setdefault(key, []).append(p)
    return groups


def cases(contract, seeds):
    op = op_of(contract)
    out = []
    for seed, klass in seeds:
        points = sweep_points(contract, seed, dict(DIMS[op], b=1, value="gauss"))
        for gkey, pts in _groups(points, op).items():
            dims = dict(gkey)
            bs = sorted({p["b"] for p in pts})
            bmax = max(bs)
            full = inputs(op, dims, bmax, generator("ord03-ops", op, seed, gkey), dims["value"])
            tag = f"s{seed}/" + "".join(f"{k}{v}" for k, v in gkey)
            for i in _rows_to_check(seed, gkey, bmax):
                args, shape = call_args(op, full, i, i + 1)
                meta = dict(seed_meta(seed, klass, row=i, **dims), no_sensitivity=True, row=i, group=tag)
                out.append(Case(f"{tag}/row{i}", args, expect_shape=shape, meta=meta))
            for b in bs:
                p = next(p for p in pts if p["b"] == b)
                args, shape = call_args(op, full, 0, b)
                meta = dict(seed_meta(seed, klass, **point_label(p)), b=b, group=tag)
                out.append(Case(f"{tag}/b{b}", args, expect_shape=shape, meta=meta))
    return out


def perturb(case):
    args = list(case.args)
    x = args[0].clone()
    x.view(-1)[0] += 1.0
    args[0] = x
    return Case(case.key, args, expect_shape=case.expect_shape, meta=dict(case.meta))


def _row_output(results, key):
    r = results.get(key)
    if not r or not r["outputs"] or r["exception"] or r["outputs"][0].dim() < 1 or r["outputs"][0].shape[0] != 1:
        return None
    return r["outputs"][0][0]


def _batch_output(results, key, c):
    r = results.get(key)
    if not r or not r["outputs"] or r["exception"] or tuple(r["outputs"][0].shape) != tuple(c.expect_shape):
        return None
    return r["outputs"][0]


def _row_mismatches(out, b, row_refs, smaller):
    """Rows of a batch's output ``out`` that differ bitwise from their batch-1 evaluation (the sampled rows) or
    from the same row in the next smaller batch of the group (every row they share: free, no extra launch)."""
    checked, where = set(), set()
    for i, ref in row_refs:
        if i < b:
            checked.add(i)
            if ref is None or ref.dtype != out.dtype or not bool((bits(out[i]) == bits(ref)).all()):
                where.add(i)
    if smaller is not None:
        n = smaller.shape[0]
        checked.update(range(n))
        if smaller.dtype != out.dtype:
            where.update(range(n))
        else:
            differ = (bits(out[:n]).reshape(n, -1) != bits(smaller).reshape(n, -1)).any(1)
            where.update(int(i) for i in torch.nonzero(differ).flatten())
    return checked, sorted(where)


def measure(contract, cases, results):
    op = op_of(contract)
    rows_by_group, batches_by_group = {}, {}
    for k, c in cases.items():
        if c.meta.get("sensitivity_of"):
            continue
        if c.meta.get("row") is not None:
            rows_by_group.setdefault(c.meta["group"], []).append((c.meta["row"], _row_output(results, k)))
        elif "b" in c.meta:
            batches_by_group.setdefault(c.meta["group"], []).append((c.meta["b"], _batch_output(results, k, c)))
    ms = []
    for key, c in cases.items():
        if "b" not in c.meta or c.meta.get("sensitivity_of"):
            continue
        r = results[key]
        out = _batch_output(results, key, c)
        if out is None:
            continue
        b = c.meta["b"]
        below = [(b2, o) for b2, o in batches_by_group.get(c.meta["group"], []) if b2 < b and o is not None]
        smaller = max(below, key=lambda t: t[0])[1] if below else None
        checked, where = _row_mismatches(out, b, rows_by_group.get(c.meta["group"], []), smaller)
        if not checked:
            continue
        checked = len(checked)
        names = {"mismatch_rows": len(where), "b": c.meta["b"]}
        names.update({d: c.meta["point"][d] for d in DIMS[op]})
        ms.append(
            {
                "point": c.meta["point"],
                "seed": c.meta["seed"],
                "seed_class": c.meta["seed_class"],
                "names": names,
                "cases": [key],
                "input_hash": r.get("input_hash"),
                "rows": where[:8],
                "checked_rows": checked,
            }
        )
    return ms


def signature(contract, measurements):
    by_b = {}
    for m in measurements:
        b = m["names"]["b"]
        by_b[b] = max(by_b.get(b, 0.0), m["names"]["mismatch_rows"] / max(m.get("checked_rows", b), 1))
    failing = sorted(b for b, f in by_b.items() if f > 0)
    pattern = None
    if failing:
        # multi-row batches below the first failing size all agree with the rows alone: a switch at a batch size;
        # already wrong at two rows: the result depends on which rows share the call
        passing_below = [b for b in by_b if 1 < b < failing[0]]
        pattern = "batch_size_step" if passing_below else "batch_position_dependent"
    return {
        "pattern": pattern,
        "discriminator": (contract.data["violation_signature"].get("discriminators") or {}).get(pattern),
        "mismatch_fraction_by_batch": {str(b): by_b[b] for b in sorted(by_b)},
        "first_failing_batch": failing[0] if failing else None,
    }


def naive_args(contract, trial):
    op = op_of(contract)
    dims = dict(DIMS[op])
    return tuple(inputs(op, dims, 64, generator("ord03-ops-naive", op, trial), "gauss"))


def naive_check(impl, reference, trial, contract=None):
    """allclose(1e-2, 1e-2) against the conforming fixture at one batch of 64 (a DPS rms_norm gets fresh buffers)."""
    args = naive_args(contract, trial)
    dps = op_of(contract) == "rms_norm"

    def call(f):
        a = [t.clone() for t in args]
        if dps:
            buf = torch.empty_like(a[0])
            f(*a, buf)
            return buf
        return f(*a)

    try:
        out = call(impl)
    except Exception:  # noqa: BLE001 - a fixture that raises fails the functional check
        return False
    expected = call(reference)
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
        return False
    return bool(torch.allclose(out.double(), expected.double(), atol=1e-2, rtol=1e-2))
