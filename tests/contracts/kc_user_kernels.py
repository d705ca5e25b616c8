"""Correct kernels written the way users write them (issue #15): blocked loops with tails, Kahan and Welford
accumulation, online softmax, tree reductions, explicit bounds checks. Every one must PASS its contract over the
whole v0.2.0 sweep, so the wider sweeps raise no false alarm. Loaded by path (/…/kc_user_kernels.py:function)."""

from __future__ import annotations

import torch


def blocked_matmul(a, b, *, config=None):
    """Tiles of 64 along K with an fp32 accumulator; the tail block is handled like any other."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for s in range(0, a.shape[1], 64):
        acc += a[:, s : s + 64] @ b[s : s + 64]
    return acc


blocked_matmul.configs = ["A"]


def _kahan_row_sum(x, block=1024):
    """Block partial sums (fp32) combined with Kahan compensation."""
    s = torch.zeros(x.shape[0], dtype=torch.float32)
    comp = torch.zeros_like(s)
    for i in range(0, x.shape[1], block):
        y = x[:, i : i + block].sum(-1) - comp
        t = s + y
        comp = (t - s) - y
        s = t
    return s


def kahan_row_mean(x):
    return _kahan_row_sum(x) / x.shape[1]


def tree_row_sum(x):
    """Pairwise tree in a fixed order (deterministic): pad odd levels with 0."""
    v = x
    while v.shape[-1] > 1:
        if v.shape[-1] % 2:
            v = torch.cat([v, torch.zeros(v.shape[:-1] + (1,), dtype=v.dtype)], -1)
        v = v[..., 0::2] + v[..., 1::2]
    return v[..., 0] if v.shape[-1] == 1 else v.sum(-1)


def welford_layer_norm(x, eps: float = 1e-5, block: int = 512):
    """Chan/Welford merge of per-block (count, mean, M2) in fp32, then one normalisation pass."""
    n = torch.zeros(x.shape[0], 1)
    mean = torch.zeros(x.shape[0], 1)
    m2 = torch.zeros(x.shape[0], 1)
    for s in range(0, x.shape[1], block):
        blk = x[:, s : s + block]
        nb = blk.shape[1]
        mb = blk.mean(-1, keepdim=True)
        m2b = ((blk - mb) ** 2).sum(-1, keepdim=True)
        tot = n + nb
        delta = mb - mean
        mean = mean + delta * (nb / tot)
        m2 = m2 + m2b + delta * delta * (n * nb / tot)
        n = tot
    return (x - mean) / torch.sqrt(m2 / n + eps)


def online_softmax(x, block: int = 256):
    """One pass over blocks with a running max and a rescaled running sum, then the normalisation."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    m = torch.full((x2.shape[0], 1), float("-inf"))
    s = torch.zeros((x2.shape[0], 1))
    for i in range(0, x2.shape[1], block):
        blk = x2[:, i : i + block]
        m_new = torch.maximum(m, blk.amax(-1, keepdim=True))
        s = s * torch.exp(m - m_new) + torch.exp(blk - m_new).sum(-1, keepdim=True)
        m = m_new
    return (torch.exp(x2 - m) / s).reshape(shape)


def tree_row_max(x):
    """Pairwise tree with torch.maximum (propagates NaN); odd levels padded with -inf."""
    v = x
    while v.shape[-1] > 1:
        if v.shape[-1] % 2:
            v = torch.cat([v, torch.full(v.shape[:-1] + (1,), float("-inf"), dtype=v.dtype)], -1)
        v = torch.maximum(v[..., 0::2], v[..., 1::2])
    return v[..., 0]


def two_step_rms_norm(x, out, eps: float = 1e-6):
    """sqrt then divide, written into the destination."""
    torch.div(x, torch.sqrt((x * x).mean(-1, keepdim=True) + eps), out=out)
    return out


def rowwise_linear(x, w):
    """One matrix-vector product per row: a row's bits cannot depend on the batch."""
    return torch.stack([torch.mv(w.t(), x[i]) for i in range(x.shape[0])]) if x.shape[0] else x @ w


def checked_gather(data, idx):
    """Explicit bounds check, then advanced indexing."""
    n = data.shape[0]
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise IndexError(f"index out of range for {n} rows")
    return data[idx]


def plain_mul(x, w):
    return x * w
