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


def _blocks(x2, block: int):
    """The column blocks of a 2-D ``x2`` as the per-block loop ``x2[:, s : s + block]`` sees them: the full blocks as
    one (rows, blocks, block) view of the same storage (no copy), and the last partial block (or None) as the
    slice."""
    rows, cols = x2.shape
    full = cols // block
    sr, sc = x2.stride()
    head = x2.as_strided((rows, full, block), (sr, block * sc, sc), x2.storage_offset()) if full else None
    tail = x2[:, full * block :] if cols % block else None
    return head, tail


def _per_block(head, tail, f):
    """f over each block's last dim, as (rows, blocks): f(head) for the full blocks, then f(tail)."""
    parts = ([f(head)] if head is not None else []) + ([f(tail).unsqueeze(1)] if tail is not None else [])
    return torch.cat(parts, 1)


def exp2_online_softmax(x, block: int = 128):
    """C-CMP-03: the FlashAttention idiom. One pass over blocks keeps a running max m (of the raw logits) and a
    running sum s, rescaled by exp2(m_old*log2e - m_new*log2e) (the scaled maxima as stored) whenever the max grows; every exponential is
    exp2(fma(x, log2e, -m*log2e)): the prescale and the max subtraction in one rounding. The rounding of
    m*log2e is one offset shared by the whole row and cancels in the ratio, so each exponent carries only
    u*|x - m|*log2e, as with exp(x - m) (docs/contracts.md#bounds-legitimate-kernels-meet). Prescaling each logit
    on its own (z = x*log2e, then z - m) does not cancel: see violating.exp2_prescaled_softmax_unfused.

    The running maxima (a cumulative max of the block maxima: exact), their scaled values, the rescale factors
    and each block's fp32 sum of exponentials are computed for all blocks at once; only the running sum, one
    fp32 multiply and one add per block, loops over the blocks, left to right: the per-block loop's arithmetic in
    its order, about 5x faster at N = 2**20 (issue #30). Not bit for bit: torch's exp2 rounds some values one ulp
    apart on its vectorised and scalar paths, which the tensor sizes pick; tests/contracts/
    test_kc_legitimate_bounds.py checks it against the per-block loop to within 8 ulp (4 at most measured)."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    scale = torch.tensor(LOG2E, dtype=torch.float32)
    rows = x2.shape[0]
    ms = torch.full((rows, 1), float("-inf"))
    s = torch.zeros((rows, 1))
    if x2.shape[1]:
        head, tail = _blocks(x2, block)
        m = torch.cummax(_per_block(head, tail, lambda b: b.amax(-1)), 1).values
        msb = m * scale
        rescale = torch.exp2(torch.cat([ms, msb[:, :-1]], 1) - msb)
        full = head.shape[1] if head is not None else 0
        sums = _per_block(
            head,
            tail,
            lambda b: torch.exp2(_fma(b, scale, -(msb[:, :full, None] if b.dim() == 3 else msb[:, -1:]))).sum(-1),
        )
        s = s[:, 0]
        for r, e in zip(rescale.t().unbind(0), sums.t().unbind(0)):
            s = s * r + e
        s, ms = s[:, None], msb[:, -1:]
    return (torch.exp2(_fma(x2, scale, -ms)) / s).reshape(shape)
