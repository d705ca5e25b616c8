"""Conforming implementations of the declared-property contracts (workers/contracts/specs/declared,
docs/contracts.md#declared-property-contracts).

The batch-invariant ones are invariant *by construction*, never by luck of the BLAS: every row is reduced in a fixed
order that does not depend on the batch (elementwise IEEE adds over fixed 32-wide blocks, then a fixed pairwise
tree; an exponential made of correctly rounded multiplies and adds), or goes through the same batch-1 path as when
it is computed alone (matmul, the products of attention)."""

from __future__ import annotations

import math

import torch

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


def rms_norm(x, out, eps: float = 1e-6):
    """Batch-invariant RMSNorm, destination-passing (the signature of C-CMP-01)."""
    ms = fixed_order_row_sum(x * x) / x.shape[1]
    torch.mul(x, (1.0 / torch.sqrt(ms + eps))[:, None], out=out)
    return out


def layer_norm(x, eps: float = 1e-5):
    """Batch-invariant two-pass LayerNorm (last dim, no affine)."""
    D = x.shape[1]
    c = x - (fixed_order_row_sum(x) / D)[:, None]
    var = fixed_order_row_sum(c * c) / D
    return c / torch.sqrt(var + eps)[:, None]


def softmax(x):
    """Batch-invariant softmax over the last dim of x[B, D] (the row max is exact, so order-free)."""
    e = elementwise_exp(x - x.amax(-1, keepdim=True))
    return e / fixed_order_row_sum(e)[:, None]


def matmul(a, b, *, config=None):
    """Batch-invariant matmul: every row of ``a`` through the same M = 1 product."""
    return torch.cat([a[i : i + 1] @ b for i in range(a.shape[0])], 0) if a.shape[0] else a @ b


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
    return _weighted(softmax(s), v)


def attention(q, k, v):
    """Batch-invariant attention over q[B, T, d], k/v[B, S, d] (no mask, scale 1/sqrt(d)): each sequence of the
    batch through the same per-sequence products and the batch-invariant softmax."""
    return torch.stack([_attend_one(q[i], k[i], v[i], False) for i in range(q.shape[0])], 0)


def gelu(x, out):
    """Exact (erf) GELU, destination-passing; an in-place call (``out`` is ``x``) is safe: the result is computed
    into a new tensor before ``out`` is written."""
    out.copy_(torch.nn.functional.gelu(x))
    return out


def cumsum(x):
    """Prefix sums along the last dim, fp32 (sequential)."""
    return torch.cumsum(x, -1)


def blocked_cumsum(x, block: int = 256):
    """A legitimate blocked scan (how a GPU kernel does it): prefix sums inside blocks of 256, then each block gets
    the sum of the totals before it (carried in fp32)."""
    R, N = x.shape
    nb = -(-N // block)
    padded = torch.cat([x, x.new_zeros(R, nb * block - N)], 1).reshape(R, nb, block)
    local = torch.cumsum(padded, -1)
    carry = torch.cumsum(local[:, :, -1], -1) - local[:, :, -1]  # exclusive prefix of the block totals
    return (local + carry[:, :, None]).reshape(R, nb * block)[:, :N].contiguous()


def topk(x, k):
    """Indices of the k largest along the last dim, descending; among equal values the lowest index first."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :k].contiguous()


def causal_attention(q, k, v):
    """Causal attention, query t sees keys 0 .. t + S - T (bottom-right aligned), fixed-order sums."""
    return torch.stack([_attend_one(q[i], k[i], v[i], True) for i in range(q.shape[0])], 0)


def sdpa_causal_attention(q, k, v):
    """Stock PyTorch attention with an explicit bottom-right causal mask (is_causal=True is top-left aligned)."""
    T, S = q.shape[1], k.shape[1]
    allowed = torch.arange(S)[None, :] <= torch.arange(T)[:, None] + (S - T)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
