"""Conforming implementations, one per class, with the signatures of docs/contract-language.md#the-twelve-classes."""

from __future__ import annotations

import torch


def matmul(a, b, *, config=None):
    """C-PRC-01 / C-CMP-02: fp32 operands, fp32 accumulate. Configs: 'A' plain, 'B' split-K=8 with fp32
    partials — both accumulate in fp32, so every config conforms."""
    if config in (None, "A"):
        return torch.matmul(a, b)
    if config == "B":
        return _split_k(a, b, 8, torch.float32)
    raise ValueError(f"unknown config {config!r}")


matmul.configs = ["A", "B"]


def _split_k(a, b, splits, partial_dtype):
    K = a.shape[1]
    step = max(1, -(-K // splits))
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32, device=a.device)
    for s in range(0, K, step):
        acc = acc + torch.matmul(a[:, s : s + step], b[s : s + step]).to(partial_dtype).to(torch.float32)
    return acc


def layer_norm(x, eps: float = 1e-5):
    """C-PRC-02: two-pass normalisation (mean, then the mean of squares of centred values)."""
    mean = x.mean(-1, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(-1, keepdim=True)
    return xc / torch.sqrt(var + eps)


def mul(x, w):
    """C-PRC-03: elementwise product with default IEEE gradual underflow."""
    return torch.mul(x, w)


def linear(x, w):
    """C-PRC-04: fp32 linear without bias."""
    return x @ w


def linear_batch_invariant(x, w):
    """C-ORD-03: every row through the same M = 1 path, so its bits cannot depend on the batch."""
    return torch.cat([x[i : i + 1] @ w for i in range(x.shape[0])], 0) if x.shape[0] else x @ w


def row_mean(x):
    """C-ORD-01: fp32 mean."""
    return x.mean(-1)


def row_sum(x):
    """C-ORD-02: fixed-order (deterministic) sum."""
    return x.sum(-1)


def rms_norm(x, out, eps: float = 1e-6):
    """C-CMP-01: fused fp32 RMSNorm with torch.rsqrt, destination-passing."""
    r = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    torch.mul(x, r, out=out)
    return out


def softmax(x):
    """C-CMP-03."""
    return torch.softmax(x, -1)


def row_max(x):
    """C-EXC-01: amax propagates NaN (IEEE_PROPAGATE)."""
    return torch.amax(x, -1)


def gather_rows(data, idx):
    """C-EXC-02: index_select raises on any index outside [0, n), negative ones included."""
    return torch.index_select(data, 0, idx)
