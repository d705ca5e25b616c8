"""Violating implementations of the declared-property contracts (docs/contracts.md#declared-property-contracts):
each passes the naive allclose check and breaks the property its contract states, the way real kernels do."""

from __future__ import annotations

import math

import torch


# The sandbox stages one module file, so the fixed-order helpers of declared_reference are repeated here verbatim
# (the violators differ from the references only where their docstrings say).
LANES = 32
LN2_HI, LN2_LO = 0.693145751953125, 1.4286067653302226e-06  # Cody-Waite split of ln 2 (LN2_HI has 12 bits)
EXP_MIN = -87.0  # below, exp(x) < 1.7e-38 (the smallest normal fp32 is 1.2e-38): taken as 0


def fixed_order_row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum of each row of ``x[B, D]`` in an order fixed by D alone: 32 lanes accumulate the row's 32-wide blocks
    left to right, then a pairwise tree adds the lanes. Only elementwise adds, each correctly rounded whatever the
    vector width, so a row's bits are the same in a batch of any size at any position."""
    B, D = x.shape
    nb = max(1, -(-D // LANES))
    if nb * LANES != D:
        x = torch.cat([x, x.new_zeros(B, nb * LANES - D)], 1)
    blocks = x.reshape(B, nb, LANES)
    acc = blocks[:, 0, :].clone()
    for j in range(1, nb):
        acc = acc + blocks[:, j, :]
    while acc.shape[1] > 1:
        h = acc.shape[1] // 2
        acc = acc[:, :h] + acc[:, h:]
    return acc[:, 0]


def elementwise_exp(x: torch.Tensor) -> torch.Tensor:
    """exp for x <= 0 from correctly rounded operations only (so no SIMD-versus-scalar-tail difference): x = n ln 2
    + r with |r| <= ln 2 / 2 (Cody-Waite), a degree-9 Taylor polynomial in r (Horner), times 2**n built from its
    exponent bits. Relative error a few ulp; exp(x) below 1.7e-38 is returned as 0."""
    x = x.clamp_min(EXP_MIN)
    n = torch.round(x * (1.0 / math.log(2.0)))
    r = (x - n * LN2_HI) - n * LN2_LO
    p = torch.full_like(r, 1.0 / math.factorial(9))
    for k in range(8, -1, -1):
        p = p * r + 1.0 / math.factorial(k)
    scale = ((n.to(torch.int32) + 127).clamp_min(1) << 23).view(torch.float32)
    return torch.where(x <= EXP_MIN, torch.zeros_like(p), p * scale)


def _attend_one(q, k, v, causal: bool):
    """One sequence, one query at a time, every sum a fixed-order row sum (a BLAS product over a long key axis is
    not even run-to-run stable: its path depends on the operands' alignment)."""
    T, d = q.shape
    S = k.shape[0]
    vt = v.T.contiguous()  # [d, S]: the output is a row sum over the keys
    out = torch.empty(T, v.shape[1], dtype=q.dtype)
    for t in range(T):
        s = fixed_order_row_sum(k * q[t]) * (1.0 / math.sqrt(d))
        if causal:  # query t (aligned to the end of the keys) sees keys 0 .. t + S - T
            s[t + S - T + 1 :] = float("-inf")
        e = elementwise_exp(s - s.max())
        p = e / fixed_order_row_sum(e[None])[0]
        out[t] = fixed_order_row_sum(vt * p)
    return out


SMALL_BATCH = 32  # below this many rows the "kernel" splits each row's reduction to fill the machine
SPLITS = 4


def split_when_small_row_sum(x: torch.Tensor) -> torch.Tensor:
    """The common real cause of batch variance: with few rows, each row's reduction is split into SPLITS chunks
    reduced separately (more parallelism) and the partials added; with many rows, one pass per row. Both orders are
    accurate; they round differently, so a row's bits depend on how many rows came with it."""
    B, D = x.shape
    if B >= SMALL_BATCH or D < SPLITS:
        return fixed_order_row_sum(x)
    parts = [fixed_order_row_sum(c.contiguous()) for c in torch.tensor_split(x, SPLITS, dim=1)]
    total = parts[-1]
    for p in reversed(parts[:-1]):
        total = total + p
    return total


def split_reduction_small_batch_rms_norm(x, out, eps: float = 1e-6):
    ms = split_when_small_row_sum(x * x) / x.shape[1]
    torch.mul(x, (1.0 / torch.sqrt(ms + eps))[:, None], out=out)
    return out


def split_reduction_small_batch_layer_norm(x, eps: float = 1e-5):
    D = x.shape[1]
    c = x - (split_when_small_row_sum(x) / D)[:, None]
    return c / torch.sqrt(split_when_small_row_sum(c * c) / D + eps)[:, None]


def split_reduction_small_batch_softmax(x):
    e = elementwise_exp(x - x.amax(-1, keepdim=True))
    return e / split_when_small_row_sum(e)[:, None]


def tile_max_softmax(x, tile: int = 8):
    """Rows handled in tiles of 8 that share one max (the max of the tile, not of the row): softmax is shift-
    invariant in exact arithmetic, so the result is accurate, but a row's bits depend on its neighbours."""
    out = torch.empty_like(x)
    for lo in range(0, x.shape[0], tile):
        blk = x[lo : lo + tile]
        e = elementwise_exp(blk - blk.amax())
        out[lo : lo + tile] = e / fixed_order_row_sum(e)[:, None]
    return out


def split_k_small_batch_matmul(a, b, *, config=None):
    """Split-K when M is small (partials over K/4 added), one product per row otherwise."""
    if a.shape[0] >= SMALL_BATCH or a.shape[1] < SPLITS:
        return torch.cat([a[i : i + 1] @ b for i in range(a.shape[0])], 0)
    chunks = torch.tensor_split(torch.arange(a.shape[1]), SPLITS)
    total = None
    for idx in chunks:
        part = a[:, idx] @ b[idx]
        total = part if total is None else total + part
    return total


def split_kv_small_batch_attention(q, k, v):
    """Flash-decoding: with few sequences, the keys are split in two halves, each attended separately and merged
    by their log-sum-exp; with many, one pass. Accurate both ways, bitwise different."""
    if q.shape[0] >= 8 or k.shape[1] < 2:
        return torch.stack([_attend_one(q[i], k[i], v[i], False) for i in range(q.shape[0])], 0)
    h = k.shape[1] // 2
    outs = []
    for i in range(q.shape[0]):
        parts = []
        for ks, vs in ((k[i, :h], v[i, :h]), (k[i, h:], v[i, h:])):
            s = torch.stack([fixed_order_row_sum(ks * qt) for qt in q[i]]) * (1.0 / math.sqrt(q.shape[-1]))
            m = s.amax(-1, keepdim=True)
            e = elementwise_exp(s - m)
            o = torch.stack([fixed_order_row_sum(vs.T.contiguous() * et) for et in e])
            parts.append((m, fixed_order_row_sum(e)[:, None], o))
        (m1, l1, o1), (m2, l2, o2) = parts
        m = torch.maximum(m1, m2)
        w1, w2 = elementwise_exp(m1 - m), elementwise_exp(m2 - m)
        outs.append((o1 * w1 + o2 * w2) / (l1 * w1 + l2 * w2))
    return torch.stack(outs, 0)
