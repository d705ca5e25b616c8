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


CHUNK = 2**20  # elements of one [rows, S, d] product: queries are taken in chunks that fit


def _scores(q, k):
    """q[T, d] k[S, d]^T as fixed-order row sums (a BLAS product over a long axis is not even run-to-run stable:
    its path depends on the operands' alignment); queries in chunks, each query's bits independent of the chunk."""
    T, d = q.shape
    S = k.shape[0]
    step = max(1, CHUNK // max(1, S * d))
    parts = [fixed_order_row_sum((q[lo : lo + step, None, :] * k[None]).reshape(-1, d)) for lo in range(0, T, step)]
    return torch.cat(parts).reshape(T, S)


def _weighted(p, v):
    """p[T, S] v[S, d] as fixed-order row sums over the keys."""
    T, S = p.shape
    vt = v.T.contiguous()  # [d, S]
    d = vt.shape[0]
    step = max(1, CHUNK // max(1, S * d))
    parts = [fixed_order_row_sum((p[lo : lo + step, None, :] * vt[None]).reshape(-1, S)) for lo in range(0, T, step)]
    return torch.cat(parts).reshape(T, d)


def _attend_one(q, k, v, causal: bool):
    """One sequence: scores, a row softmax from correctly rounded operations, the weighted values."""
    T, S = q.shape[0], k.shape[0]
    s = _scores(q, k) * (1.0 / math.sqrt(q.shape[1]))
    if causal:  # query t (aligned to the end of the keys) sees keys 0 .. t + S - T
        s = s.masked_fill(torch.arange(S)[None, :] > torch.arange(T)[:, None] + (S - T), float("-inf"))
    e = elementwise_exp(s - s.amax(-1, keepdim=True))
    return _weighted(e / fixed_order_row_sum(e)[:, None], v)


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
            s = _scores(q[i], ks) * (1.0 / math.sqrt(q.shape[-1]))
            m = s.amax(-1, keepdim=True)
            e = elementwise_exp(s - m)
            parts.append((m, fixed_order_row_sum(e)[:, None], _weighted(e, vs)))
        (m1, l1, o1), (m2, l2, o2) = parts
        m = torch.maximum(m1, m2)
        w1, w2 = elementwise_exp(m1 - m), elementwise_exp(m2 - m)
        outs.append((o1 * w1 + o2 * w2) / (l1 * w1 + l2 * w2))
    return torch.stack(outs, 0)


def tanh_gelu(x, out):
    """GELU by the tanh approximation where the exact (erf) one is declared: within 2e-4 everywhere."""
    out.copy_(torch.nn.functional.gelu(x, approximate="tanh"))
    return out


def inplace_unsafe_gelu(x, out):
    """Exact GELU written in stages into ``out``: correct out of place; in place (``out`` is ``x``) the first
    stage overwrites x before the last one reads it."""
    out.copy_(torch.erf(x * (1.0 / math.sqrt(2.0))))
    out.add_(1.0)
    out.mul_(x)
    out.mul_(0.5)
    return out


def inplace_cumsum(x):
    """Correct prefix sums, written over the input and returned (the output aliases the input)."""
    return torch.cumsum(x, -1, out=x)


def fp16_carry_cumsum(x, block: int = 256):
    """Blocked scan whose running carry between blocks is kept in fp16 (a half-precision shared-memory buffer)."""
    R, N = x.shape
    out = torch.empty_like(x)
    carry = torch.zeros(R, dtype=torch.float16)
    for lo in range(0, N, block):
        local = torch.cumsum(x[:, lo : lo + block], -1)
        out[:, lo : lo + block] = local + carry.float()[:, None]
        carry = (carry.float() + local[:, -1]).half()
    return out


def lost_tail_carry_cumsum(x, block: int = 1024):
    """Blocked scan that forgets the carry into the last block when N is not a multiple of the block."""
    R, N = x.shape
    out = torch.empty_like(x)
    carry = torch.zeros(R, dtype=x.dtype)
    for lo in range(0, N, block):
        local = torch.cumsum(x[:, lo : lo + block], -1)
        tail = lo + block > N
        out[:, lo : lo + block] = local if tail else local + carry[:, None]
        carry = carry + local[:, -1]
    return out


def highest_index_ties_topk(x, k):
    """Top-k whose ties come out highest index first (a descending sort of the reversed row)."""
    n = x.shape[-1]
    idx = torch.sort(torch.flip(x, [-1]), dim=-1, descending=True, stable=True).indices[:, :k]
    return (n - 1 - idx).contiguous()


def block_merge_topk(x, k, block: int = 128):
    """Per-block top-k (stable inside a block), then a merge that visits the blocks last to first: ties inside a
    block keep the lowest index, ties across blocks do not."""
    R, n = x.shape
    cand_v, cand_i = [], []
    for lo in reversed(range(0, n, block)):
        seg = x[:, lo : lo + block]
        idx = torch.sort(seg, dim=-1, descending=True, stable=True).indices[:, : min(k, seg.shape[1])]
        cand_v.append(torch.gather(seg, 1, idx))
        cand_i.append(idx + lo)
    vals, ids = torch.cat(cand_v, 1), torch.cat(cand_i, 1)
    order = torch.sort(vals, dim=-1, descending=True, stable=True).indices[:, :k]
    return torch.gather(ids, 1, order).contiguous()


def _masked_attention(q, k, v, allowed):
    s = (q @ k.transpose(1, 2)) * (1.0 / math.sqrt(q.shape[-1]))
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v


def tail_tile_off_by_one_causal_attention(q, k, v, tile: int = 16):
    """Causal mask computed per query tile of 16; in a partial last tile the boundary is off by one (each of its
    queries also sees the next key)."""
    T, S = q.shape[1], k.shape[1]
    t = torch.arange(T)[:, None]
    shift = ((T % tile != 0) & (t >= T - T % tile)).long()
    allowed = torch.arange(S)[None, :] <= t + (S - T) + shift
    return _masked_attention(q, k, v, allowed)


def diagonal_tile_only_mask_causal_attention(q, k, v, tile: int = 16):
    """The mask is applied only inside the tile on the diagonal; key tiles after it are not masked."""
    T, S = q.shape[1], k.shape[1]
    t, s = torch.arange(T)[:, None], torch.arange(S)[None, :]
    causal = s <= t + (S - T)
    same_tile = (s // tile) == ((t + (S - T)) // tile)
    return _masked_attention(q, k, v, torch.where(same_tile, causal, torch.ones_like(causal)))


def stock_topk(x, k):
    """torch.topk: its tie order is unspecified (platform-dependent violator of LOWEST_INDEX)."""
    return torch.topk(x, k, dim=-1).indices.contiguous()
