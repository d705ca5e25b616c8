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


def welford_layer_norm(x, eps: float = 1e-5, block: int = 512):
    """C-PRC-02: blocked Welford / Chan merge, the layout of GPU layer-norm kernels. Each block of ``block``
    columns gives (count, mean, M2) in fp32; the blocks are merged serially left to right (Chan, Golub & LeVeque
    1983: delta = mean_b - mean, mean += delta*n_b/n, M2 += M2_b + delta**2*n*n_b/n), then one normalisation
    pass. Its error grows like sqrt(D/block)*u*kappa (docs/contracts.md#bounds-legitimate-kernels-meet)."""
    rows = x.shape[0]
    n = torch.zeros(rows, 1)
    mean = torch.zeros(rows, 1)
    m2 = torch.zeros(rows, 1)
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


LOG2E = 1.4426950408889634


def _fma(a, b, c):
    """a*b + c rounded once to fp32 (a, b, c fp32): the product of two fp32 values is exact in fp64, so only the
    fp64 sum and the final cast round, an emulation of the GPU's fused multiply-add."""
    return (a.double() * b.double() + c.double()).float()


def exp2_online_softmax(x, block: int = 128):
    """C-CMP-03: the FlashAttention idiom. One pass over blocks keeps a running max m (of the raw logits) and a
    running sum s, rescaled by exp2(m_old*log2e - m_new*log2e) (the scaled maxima as stored) whenever the max grows; every exponential is
    exp2(fma(x, log2e, -m*log2e)): the prescale and the max subtraction in one rounding. The rounding of
    m*log2e is one offset shared by the whole row and cancels in the ratio, so each exponent carries only
    u*|x - m|*log2e, as with exp(x - m) (docs/contracts.md#bounds-legitimate-kernels-meet). Prescaling each logit
    on its own (z = x*log2e, then z - m) does not cancel: see violating.exp2_prescaled_softmax_unfused."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    scale = torch.tensor(LOG2E, dtype=torch.float32)
    m = torch.full((x2.shape[0], 1), float("-inf"))
    ms = torch.full((x2.shape[0], 1), float("-inf"))
    s = torch.zeros((x2.shape[0], 1))
    for i in range(0, x2.shape[1], block):
        blk = x2[:, i : i + block]
        m = torch.maximum(m, blk.amax(-1, keepdim=True))
        ms_new = m * scale
        s = s * torch.exp2(ms - ms_new) + torch.exp2(_fma(blk, scale, -ms_new)).sum(-1, keepdim=True)
        ms = ms_new
    return (torch.exp2(_fma(x2, scale, -ms)) / s).reshape(shape)
