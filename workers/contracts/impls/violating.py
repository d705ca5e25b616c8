"""Violating implementations (docs/contract-language.md#three-state-calibration): each passes the naive
allclose(1e-2, 1e-2) check on random inputs and fails its contract. They are CPU emulations of real defects, except
``flush_denormal_mul`` (a real FTZ/DAZ switch) and ``torch_mm_linear`` (stock torch.mm, batch-variant on many BLAS
builds)."""

from __future__ import annotations

import os

import torch


# ---------------------------------------------------------------- C-PRC-01: precision coercion (Ascend)
def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Round fp32 to ``bits`` explicit mantissa bits, round-to-nearest-even, through an int view."""
    drop = 23 - bits
    i = x.contiguous().view(torch.int32).to(torch.int64)
    half = 1 << (drop - 1)
    lsb = (i >> drop) & 1
    i = ((i + half - 1 + lsb) >> drop) << drop
    return i.to(torch.int32).view(torch.float32).reshape(x.shape)


def hf32_matmul(a, b, *, config=None):
    """HF32 (Ascend): operands rounded to 11 mantissa bits, fp32 accumulate."""
    return torch.matmul(round_mantissa(a, 11), round_mantissa(b, 11))


def tf32_matmul(a, b, *, config=None):
    """TF32 (NVIDIA allow_tf32): operands rounded to 10 mantissa bits."""
    return torch.matmul(round_mantissa(a, 10), round_mantissa(b, 10))


def fp16_accumulate_matmul(a, b, *, config=None, chunk: int = 32):
    """fp16 operands and an fp16 running accumulator over chunks of 32 (CANN force_fp16-like)."""
    a16, b16 = a.to(torch.float16), b.to(torch.float16)
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16, device=a.device)
    for s in range(0, a.shape[1], chunk):
        part = torch.matmul(a16[:, s : s + chunk].float(), b16[s : s + chunk].float())
        acc = (acc.float() + part).to(torch.float16)
    return acc.float()


# ---------------------------------------------------------------- C-PRC-02: one-pass variance
def one_pass_layer_norm(x, eps: float = 1e-5):
    """E[x^2] - E[x]^2 in fp32, clamped at 0 so it never produces NaN."""
    mean = x.mean(-1, keepdim=True)
    var = ((x * x).mean(-1, keepdim=True) - mean * mean).clamp_min(0)
    return (x - mean) / torch.sqrt(var + eps)


# ---------------------------------------------------------------- C-PRC-03: FTZ/DAZ
def flush_denormal_mul(x, w):
    """x*w under torch.set_flush_denormal(True): the CPU's real FTZ/DAZ (MXCSR) switch."""
    torch.set_flush_denormal(True)
    try:
        return torch.mul(x, w)
    finally:
        torch.set_flush_denormal(False)


# ---------------------------------------------------------------- C-PRC-04: fp16-internal linear
def fp16_internal_linear(x, w):
    """Operands and output stored as fp16, fp32 math inside (range silently narrowed to fp16)."""
    return (x.to(torch.float16).float() @ w.to(torch.float16).float()).to(torch.float16).float()


# ---------------------------------------------------------------- C-ORD-01: bf16 partials
def bf16_partials_row_mean(x, block: int = 64):
    """Split reduction whose block-64 partial sums are stored in bf16 (the 'partials in output dtype' bug)."""
    R, N = x.shape
    pad = (-N) % block
    xp = torch.nn.functional.pad(x, (0, pad))
    partial = xp.reshape(R, -1, block).sum(-1).to(torch.bfloat16).float()
    return partial.sum(-1) / N


# ---------------------------------------------------------------- C-ORD-02: atomic arrival order
def random_order_row_sum(x):
    """Sum in a fresh random column order on every launch (os.urandom): emulates atomicAdd arrival order."""
    g = torch.Generator()
    g.manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))
    perm = torch.randperm(x.shape[1], generator=g)
    xp = x[:, perm]
    acc = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device)
    for s in range(0, x.shape[1], 16):  # sequential blocks, so the order actually reaches the result
        acc = acc + xp[:, s : s + 16].sum(-1)
    return acc


# ---------------------------------------------------------------- C-ORD-03: batch variance
def torch_mm_linear(x, w):
    """Stock torch.mm. On many CPU BLAS builds (and cuBLAS) the kernel depends on M, so rows differ
    bit-for-bit between batch 1 and larger batches. Platform-dependent."""
    return torch.mm(x, w)


def split_k_small_batch_linear(x, w, splits: int = 4):
    """Emulation: split-K (fp32 partials) only when batch < 4 — a strategy switch on M."""
    if x.shape[0] >= 4:
        return x @ w
    K = x.shape[1]
    step = -(-K // splits)
    acc = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float32, device=x.device)
    for s in range(0, K, step):
        acc = acc + x[:, s : s + step] @ w[s : s + step]
    return acc


# ---------------------------------------------------------------- C-CMP-01: fast-math / Sakana
def fast_rsqrt(v: torch.Tensor) -> torch.Tensor:
    """0x5F3759DF bit-hack rsqrt plus one Newton step (~1.7e-3 relative error)."""
    i = v.contiguous().view(torch.int32)
    y = (0x5F3759DF - (i >> 1)).view(torch.float32)
    return y * (1.5 - 0.5 * v * y * y)


def fast_rsqrt_rms_norm(x, out, eps: float = 1e-6):
    r = fast_rsqrt((x * x).mean(-1, keepdim=True) + eps)
    torch.mul(x, r, out=out)
    return out


def no_write_rms_norm(x, out, eps: float = 1e-6):
    """Sakana-type: never writes ``out``. Passes in a harness that hands it the reference's buffer."""
    return out


def partial_rms_norm(x, out, eps: float = 1e-6):
    """Computes only the first half of the rows (the 'partial output' reward hack)."""
    h = x.shape[0] // 2 or 1
    r = torch.rsqrt((x[:h] * x[:h]).mean(-1, keepdim=True) + eps)
    torch.mul(x[:h], r, out=out[:h])
    return out


def stale_empty_rms_norm(x, out, eps: float = 1e-6):
    """Returns a torch.empty buffer it never writes — correct only if the allocator hands back the
    reference's freed result (allocator-dependent; on CUDA the caching allocator makes it likely)."""
    res = torch.empty_like(x)
    out.copy_(res)
    return out


# ---------------------------------------------------------------- C-CMP-02: config-dependent accumulate
def autotuned_matmul(a, b, *, config=None):
    """Config 'A': fp32. Config 'B': split-K=8 with partials stored in fp16; the 'tuner' picks B for M <= 32,
    so a naive check at M = 128 only ever sees A."""
    if config is None:
        config = "B" if a.shape[0] <= 32 else "A"
    if config == "A":
        return torch.matmul(a, b)
    if config == "B":
        K = a.shape[1]
        step = -(-K // 8)
        acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32, device=a.device)
        for s in range(0, K, step):
            acc = acc + torch.matmul(a[:, s : s + step], b[s : s + step]).to(torch.float16).float()
        return acc
    raise ValueError(f"unknown config {config!r}")


autotuned_matmul.configs = ["A", "B"]


# ---------------------------------------------------------------- C-CMP-03: tail-mask bug
def tail_skip_softmax(x, block: int = 16):
    """Leaves tail elements beyond the last full block of 16 out of the max and the sum."""
    N = x.shape[-1]
    full = (N // block) * block
    if full:
        m = x[..., :full].amax(-1, keepdim=True)
    else:
        m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)
    e = torch.exp(x - m)
    s = e[..., :full].sum(-1, keepdim=True)
    return e / s


# ---------------------------------------------------------------- C-EXC-01: NaN-dropping max
def fmax_tree_row_max(x):
    """Pairwise tree reduction with torch.fmax, which returns the non-NaN operand (drops NaN)."""
    v = x
    while v.shape[-1] > 1:
        n = v.shape[-1]
        if n % 2:
            v = torch.cat([v, torch.full(v.shape[:-1] + (1,), float("-inf"), dtype=v.dtype, device=v.device)], -1)
        v = torch.fmax(v[..., 0::2], v[..., 1::2])
    return v[..., 0]


# ---------------------------------------------------------------- C-EXC-02: AMD buffer-load semantics
def zero_fill_gather(data, idx):
    """Out-of-bounds rows read as 0 (AMD buffer loads), no exception."""
    n = data.shape[0]
    ok = (idx >= 0) & (idx < n)
    out = torch.zeros(idx.shape[0], data.shape[1], dtype=data.dtype, device=data.device)
    out[ok] = data[idx[ok]]
    return out


def clamp_gather(data, idx):
    """Out-of-bounds indices clamped to [0, n-1] (another silent policy)."""
    return data[idx.clamp(0, data.shape[0] - 1)]


# ---------------------------------------------------------------- merges that legitimate kernels get wrong
def chan_merge_without_delta_layer_norm(x, eps: float = 1e-5, block: int = 512):
    """C-PRC-02: the blocked Welford merge of reference.welford_layer_norm with the between-block term
    delta**2*n*n_b/n dropped from M2, so the variance misses the spread of the block means (about 1/block of it)."""
    rows = x.shape[0]
    n = torch.zeros(rows, 1)
    mean = torch.zeros(rows, 1)
    m2 = torch.zeros(rows, 1)
    for s in range(0, x.shape[1], block):
        blk = x[:, s : s + block]
        nb = blk.shape[1]
        mb = blk.mean(-1, keepdim=True)
        tot = n + nb
        mean = mean + (mb - mean) * (nb / tot)
        m2 = m2 + ((blk - mb) ** 2).sum(-1, keepdim=True)
        n = tot
    return (x - mean) / torch.sqrt(m2 / n + eps)


def exp2_online_softmax_no_rescale(x, block: int = 128):
    """C-CMP-03: reference.exp2_online_softmax without rescaling the running sum when the running max grows
    (s += sum(exp2(z - m_new)) only), the classic online-softmax bug: blocks before the last max increase are
    over-weighted by exp2(m_new - m_old).

    As in reference.exp2_online_softmax (issue #30), the running maxima and each block's sum are computed for all
    blocks at once and only the running sum's fp32 adds loop over the blocks, left to right."""
    from .reference import _blocks, _per_block

    shape = x.shape
    z = x.reshape(-1, shape[-1]) * 1.4426950408889634
    m = torch.full((z.shape[0], 1), float("-inf"))
    s = torch.zeros((z.shape[0], 1))
    if z.shape[1]:
        head, tail = _blocks(z, block)
        ms = torch.cummax(_per_block(head, tail, lambda b: b.amax(-1)), 1).values
        full = head.shape[1] if head is not None else 0
        sums = _per_block(
            head, tail, lambda b: torch.exp2(b - (ms[:, :full, None] if b.dim() == 3 else ms[:, -1:])).sum(-1)
        )
        s = s[:, 0]
        for e in sums.t().unbind(0):
            s = s + e
        s, m = s[:, None], ms[:, -1:]
    return (torch.exp2(z - m) / s).reshape(shape)


def exp2_prescaled_softmax_unfused(x, block: int = 128):
    """C-CMP-03: reference.exp2_online_softmax with the prescale rounded per logit (z = x*log2e in fp32, then
    z - max z). Each exponent then carries u*|x|*log2e of its own: about 1e-4 relative at |x| = 1000, which the
    max subtraction cannot cancel. Conforming on small logits, above the bound on large ones (but only on the
    seeds whose large-logit rows put several entries near the max: it is caught by chance, not by design)."""
    shape = x.shape
    z = x.reshape(-1, shape[-1]) * 1.4426950408889634
    m = torch.full((z.shape[0], 1), float("-inf"))
    s = torch.zeros((z.shape[0], 1))
    for i in range(0, z.shape[1], block):
        blk = z[:, i : i + block]
        m_new = torch.maximum(m, blk.amax(-1, keepdim=True))
        s = s * torch.exp2(m - m_new) + torch.exp2(blk - m_new).sum(-1, keepdim=True)
        m = m_new
    return (torch.exp2(z - m) / s).reshape(shape)
