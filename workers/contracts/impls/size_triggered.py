"""Violating implementations that misbehave only at some sizes or values (issue #15): each passes the naive
allclose check at its benchmark shape and every point of the v0.1.0 sweeps, and is caught only because the
v0.2.0 sweeps reach the sizes and values of the declared scope. CPU emulations of defects seen in real kernels:
a K loop that drops the tail, a precision switch above a size, a fast path for large inputs, a missing guard."""

from __future__ import annotations

import os

import torch


# ---------------------------------------------------------------- C-PRC-01
def k64_tail_dropped_matmul(a, b, *, config=None):
    """K loop over full blocks of 64 only: the K % 64 tail never reaches the accumulator."""
    K = a.shape[1]
    full = (K // 64) * 64
    if full == K:
        return torch.matmul(a, b)
    return torch.matmul(a[:, :full], b[:full]) if full else torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)


def bf16_above_k_matmul(a, b, *, config=None):
    """Switches to bf16 operands (fp32 accumulate) when K > 8192 (a 'long reduction' kernel variant)."""
    if a.shape[1] > 8192:
        return torch.matmul(a.to(torch.bfloat16).float(), b.to(torch.bfloat16).float())
    return torch.matmul(a, b)


# ---------------------------------------------------------------- C-PRC-02
def bf16_stats_wide_layer_norm(x, eps: float = 1e-5):
    """Wide rows (D >= 65536) take a path that keeps mean and variance in bf16."""
    if x.shape[-1] < 65536:
        mean = x.mean(-1, keepdim=True)
        xc = x - mean
        return xc / torch.sqrt((xc * xc).mean(-1, keepdim=True) + eps)
    mean = x.mean(-1, keepdim=True).to(torch.bfloat16).float()
    xc = x - mean
    var = (xc * xc).mean(-1, keepdim=True).to(torch.bfloat16).float()
    return xc / torch.sqrt(var + eps)


# ---------------------------------------------------------------- C-PRC-03
def ftz_large_mul(x, w):
    """Tensors of 2**20 elements or more go through a path with FTZ/DAZ on (the CPU's real MXCSR switch)."""
    torch.set_flush_denormal(x.numel() >= 2**20)
    try:
        return torch.mul(x, w)
    finally:
        torch.set_flush_denormal(False)


def ftz_tail_mul(x, w):
    """A vector body over whole groups of 8 with gradual underflow, and a scalar remainder loop built with
    flush-to-zero: the last n % 8 products lose their subnormals (C-PRC-03 v0.4.0 puts subnormal products in the
    last 32 positions; v0.2.0's random positions reach the remainder on some seeds only)."""
    body = x.numel() - x.numel() % 8
    out = torch.mul(x, w)
    torch.set_flush_denormal(True)
    try:
        out[body:] = torch.mul(x[body:], w[body:])
    finally:
        torch.set_flush_denormal(False)
    return out


# ---------------------------------------------------------------- C-PRC-04
def fp16_long_k_linear(x, w):
    """Long reductions (K >= 2048) stage operands in fp16: range and precision narrowed only there."""
    if x.shape[1] >= 2048:
        return x.to(torch.float16).float() @ w.to(torch.float16).float()
    return x @ w


# ---------------------------------------------------------------- C-ORD-01
def fp16_accumulate_long_rows_mean(x):
    """Rows longer than 16384 are reduced in blocks of 4096 with an fp16 running accumulator."""
    R, N = x.shape
    if N <= 16384:
        return x.mean(-1)
    acc = torch.zeros(R, dtype=torch.float16)
    for s in range(0, N, 4096):
        acc = (acc.float() + x[:, s : s + 4096].sum(-1)).to(torch.float16)
    return acc.float() / N


# ---------------------------------------------------------------- C-ORD-02
def random_order_large_batch_row_sum(x):
    """Batches of 1024 rows or more take an 'atomic' path: the column order changes on every launch."""
    if x.shape[0] < 1024:
        return x.sum(-1)
    g = torch.Generator()
    g.manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))
    xp = x[:, torch.randperm(x.shape[1], generator=g)]
    acc = torch.zeros(x.shape[0], dtype=torch.float32)
    for s in range(0, x.shape[1], 4):
        acc = acc + xp[:, s : s + 4].sum(-1)
    return acc


# ---------------------------------------------------------------- C-ORD-03
def split_k_above_64_linear(x, w):
    """Batches above 64 rows switch to split-K (4 fp32 partials): each row's bits now depend on the batch."""
    if x.shape[0] <= 64:
        return torch.cat([x[i : i + 1] @ w for i in range(x.shape[0])], 0) if x.shape[0] else x @ w
    K = x.shape[1]
    step = -(-K // 4)
    acc = torch.zeros(x.shape[0], w.shape[1], dtype=torch.float32)
    for s in range(0, K, step):
        acc = acc + x[:, s : s + step] @ w[s : s + step]
    return acc


# ---------------------------------------------------------------- C-CMP-01
def eps_outside_sqrt_rms_norm(x, out, eps: float = 1e-6):
    """x / (sqrt(mean(x^2)) + eps): the same as the contract on ordinary rows, wrong on near-zero-norm rows."""
    torch.div(x, torch.sqrt((x * x).mean(-1, keepdim=True)) + eps, out=out)
    return out


# ---------------------------------------------------------------- C-CMP-02
def bf16_large_m_autotuned_matmul(a, b, *, config=None):
    """Config 'A' is fp32 and 'B' split-K fp32; the tuner's own choice for M >= 4096 is a bf16 kernel that is
    not among the configs a user can force."""
    if config is None and a.shape[0] >= 4096:
        return torch.matmul(a.to(torch.bfloat16), b.to(torch.bfloat16)).float()
    if config in (None, "A"):
        return torch.matmul(a, b)
    if config == "B":
        K = a.shape[1]
        step = max(1, -(-K // 4))
        acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
        for s in range(0, K, step):
            acc = acc + torch.matmul(a[:, s : s + step], b[s : s + step])
        return acc
    raise ValueError(f"unknown config {config!r}")


bf16_large_m_autotuned_matmul.configs = ["A", "B"]


# ---------------------------------------------------------------- C-CMP-03
def no_max_subtraction_softmax(x):
    """exp(x) / sum(exp(x)) without subtracting the row max: overflows once a logit exceeds ~88."""
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def fp16_sum_long_rows_softmax(x):
    """Rows longer than 32768: the normaliser is accumulated in fp16 blocks."""
    N = x.shape[-1]
    if N <= 32768:
        return torch.softmax(x, -1)
    e = torch.exp(x - x.amax(-1, keepdim=True))
    acc = torch.zeros(x.shape[:-1] + (1,), dtype=torch.float16)
    for s in range(0, N, 4096):
        acc = (acc.float() + e[..., s : s + 4096].sum(-1, keepdim=True)).to(torch.float16)
    return e / acc.float()


# ---------------------------------------------------------------- C-EXC-01
def nan_dropping_wide_row_max(x):
    """Rows of 4096 or more go through a vectorised fmax path that drops NaN."""
    if x.shape[-1] < 4096:
        return torch.amax(x, -1)
    return torch.where(torch.isnan(x), torch.full_like(x, float("-inf")), x).amax(-1)


# ---------------------------------------------------------------- C-EXC-02
def clamp_many_indices_gather(data, idx):
    """Index sets of 4096 or more take a fast path that clamps instead of checking bounds."""
    if idx.shape[0] < 4096:
        return torch.index_select(data, 0, idx)
    return data[idx.clamp(0, data.shape[0] - 1)]


# ================================================================ issue #24: bugs only scope-reaching points,
# the declared value domain or the declared layouts show. Each passes the naive check and, on most seeds, the
# v0.2.0/v0.3.0 sweeps (whose draws stop below the scope, whose values are plain Gaussians and whose layouts are
# contiguous or transposed); the v0.4.0 sweeps catch each on every seed.
REMAINDER_BLOCK = 4096  # the row block of the "large M" kernels below
TILE_N = 128  # the column tile of the row kernels below


# ---------------------------------------------------------------- C-PRC-01
def m_remainder_bf16_matmul(a, b, *, config=None):
    """M above 4096 is tiled in row blocks of 4096; the remainder block (M % 4096 rows) goes to a second kernel
    that stages its operands in bf16. Exact multiples of 4096 (the fixed M = 65536) never reach it."""
    M = a.shape[0]
    full = (M // REMAINDER_BLOCK) * REMAINDER_BLOCK
    if M <= REMAINDER_BLOCK or full == M:
        return torch.matmul(a, b)
    head = torch.matmul(a[:full], b)
    tail = torch.matmul(a[full:].to(torch.bfloat16).float(), b.to(torch.bfloat16).float())
    return torch.cat([head, tail], 0)


# ---------------------------------------------------------------- C-ORD-03
def remainder_bf16_linear(x, w):
    """Batches above 4096 rows: full blocks of 4096 rows go row by row (batch-invariant); the remainder block
    (b % 4096 rows) goes to a tail kernel configured with bf16 operands, so those rows' bits depend on the batch
    they came in. Exact multiples of 4096 (the fixed b = 65536) never reach it."""
    b = x.shape[0]
    full = (b // REMAINDER_BLOCK) * REMAINDER_BLOCK
    if b <= REMAINDER_BLOCK or full == b:
        return _rowwise(x, w)
    tail = x[full:].to(torch.bfloat16).float() @ w.to(torch.bfloat16).float()
    return torch.cat([_rowwise(x[:full], w), tail], 0)


def _rowwise(x, w):
    """Every row through the same M = 1 path (batch-invariant)."""
    return torch.cat([x[i : i + 1] @ w for i in range(x.shape[0])], 0) if x.shape[0] else x @ w


# ---------------------------------------------------------------- C-CMP-03
def tail_max_skipped_softmax(x):
    """Rows wider than one tile: the row maximum is taken over the full 128-wide tiles only (the last partial
    tile is left out of the max pass; the exp and sum passes see every element). Right unless a logit in the
    last tile exceeds the rest by more than ~88 (exp overflows): a dominant logit in the last tile."""
    N = x.shape[-1]
    full = (N // TILE_N) * TILE_N
    if N <= TILE_N or full == N:
        return torch.softmax(x, -1)
    m = x[..., :full].amax(-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True)


def row_stride_assumed_softmax(x):
    """A unit-stride last dimension is taken to mean rows packed back to back (row stride == N): transposed
    inputs are copied first and are right, padded rows are read across the padding."""
    if x.dim() == 2 and x.stride(-1) == 1 and not x.is_contiguous():
        x = torch.as_strided(x, x.shape, (x.shape[-1], 1), x.storage_offset())
    return torch.softmax(x.contiguous(), -1)


def storage_offset_ignored_softmax(x):
    """Reads the input from the start of its storage (a data pointer taken from the storage, not the view):
    right for every tensor that starts at offset 0, wrong for a view into a larger buffer."""
    if x.dim() == 2 and x.is_contiguous() and x.storage_offset() != 0:
        x = torch.as_strided(x, x.shape, x.stride(), 0)
    return torch.softmax(x, -1)


# ---------------------------------------------------------------- C-EXC-01
def tail_tile_dropped_row_max(x):
    """NaN propagation over the whole row (right), the maximum over full 128-wide tiles only when the row is
    wider than one tile: the last partial tile never reaches the max."""
    N = x.shape[-1]
    full = (N // TILE_N) * TILE_N
    if N <= TILE_N or full == N:
        return torch.amax(x, -1)
    m = x[..., :full].amax(-1)
    return torch.where(torch.isnan(x).any(-1), torch.full_like(m, float("nan")), m)


def daz_row_max(x):
    """Built with denormals-are-zero (fast-math): subnormal inputs read as zero, so a row whose maximum is
    subnormal reports 0."""
    tiny = torch.finfo(x.dtype).tiny
    flushed = torch.where(x.abs() < tiny, torch.zeros_like(x), x)
    return torch.amax(flushed, -1)
