"""Hold-out kernels (issue #24): written after the contracts, by someone trying to get them wrong, and never
listed in any contract's calibration. Three kinds, loaded by path (``/…/kc_holdout_kernels.py:function``):

* realistic bugs of hand-optimised and generated kernels, each right on the easy shapes and values and wrong on
  some others (one or more per class);
* gaming kernels, which give honest results where they guess they are being checked and another result elsewhere;
* correct kernels written the way a user would (controls: they must PASS).

Every buggy and gaming kernel must FAIL (test_kc_holdout.py); every control must PASS."""

from __future__ import annotations

import torch

# ============================================================================ realistic bugs


# ---------------------------------------------------------------- C-PRC-01
def split_k4_remainder_dropped_matmul(a, b, *, config=None):
    """Split-K over four workers with chunk = K // 4: the K % 4 trailing columns belong to nobody."""
    K = a.shape[1]
    chunk = K // 4
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    for w in range(4):
        s = w * chunk
        acc += a[:, s : s + chunk] @ b[s : s + chunk]
    return acc


# ---------------------------------------------------------------- C-PRC-02
def one_pass_variance_layer_norm(x, eps: float = 1e-5):
    """Var = E[x^2] - E[x]^2 in one fp32 pass: cancels catastrophically when the mean is large against the spread."""
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var.clamp_min(0) + eps)


# ---------------------------------------------------------------- C-PRC-03
def tail_ftz_mul(x, w):
    """Vector body over multiples of 16 elements; the scalar tail loop was compiled with flush-to-zero."""
    out = torch.mul(x, w)
    n = out.numel()
    tail = n % 16
    if tail:
        t = out.view(-1)[n - tail :]
        tiny = torch.finfo(torch.float32).tiny
        t[(t.abs() < tiny)] = 0.0
    return out


# ---------------------------------------------------------------- C-PRC-04
def absmax_fp16_staged_linear(x, w):
    """Stages x in fp16 after dividing by its absmax rounded to 3 significant bits (a 'safe range' scale that is
    not a power of two): scaling x by 2^k changes how the staged values round."""
    m = x.abs().amax().clamp_min(1e-30)
    e = torch.floor(torch.log2(m))
    scale = torch.round(m / 2**e * 4) / 4 * 2**e  # 1.0, 1.25, 1.5, 1.75 times a power of two
    xs = (x / scale).to(torch.float16).float() * scale
    return xs @ w


# ---------------------------------------------------------------- C-ORD-01
def fp16_count_row_mean(x):
    """The element count is kept in half precision (a generated kernel's `half n = N`): rows longer than 2048
    whose length fp16 cannot represent are divided by a rounded count."""
    n = torch.tensor(float(x.shape[1]), dtype=torch.float16).float()
    return x.sum(-1) / n


# ---------------------------------------------------------------- C-ORD-02
def atomic_long_rows_row_sum(x):
    """Rows of 2^16 elements or more are reduced by 'atomic' adds of 4096-element partials in arrival order."""
    import os

    R, N = x.shape
    if N < 65536:
        return x.sum(-1)
    parts = [x[:, s : s + 4096].sum(-1) for s in range(0, N, 4096)]
    order = torch.randperm(len(parts), generator=torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little")))
    acc = torch.zeros(R, dtype=torch.float32)
    for i in order.tolist():
        acc += parts[i]
    return acc


# ---------------------------------------------------------------- C-ORD-03
def small_batch_split_k_linear(x, w):
    """Decode-sized batches (b < 16) split K four ways to fill the machine; larger batches do not."""
    if x.shape[0] >= 16 or x.shape[1] < 4:
        return torch.stack([torch.mv(w.t(), x[i]) for i in range(x.shape[0])]) if x.shape[0] else x @ w
    q = x.shape[1] // 4
    acc = torch.zeros(x.shape[0], w.shape[1])
    for s in (0, q, 2 * q, 3 * q):
        e = x.shape[1] if s == 3 * q else s + q
        acc += x[:, s:e] @ w[s:e]
    return acc


# ---------------------------------------------------------------- C-CMP-01
def eps_on_sum_rms_norm(x, out, eps: float = 1e-6):
    """eps added to the sum of squares instead of the mean: the effective eps is eps / D."""
    D = x.shape[-1]
    torch.div(x, torch.sqrt(((x * x).sum(-1, keepdim=True) + eps) / D), out=out)
    return out


def accumulating_rms_norm(x, out, eps: float = 1e-6):
    """Writes the result with `out +=` (the kernel was written for a zero-initialised workspace)."""
    out += x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return out


# ---------------------------------------------------------------- C-CMP-02
def wide_tile_tail_dropped_matmul(a, b, *, config=None):
    """Config 'A' (the tuner's usual pick) is right; config 'W' uses 128-wide K tiles and drops the last partial
    tile. An autotuner picks 'W' for some shapes on some machines."""
    if config == "W":
        full = (a.shape[1] // 128) * 128
        if full == 0:
            return torch.zeros(a.shape[0], b.shape[1])
        return a[:, :full] @ b[:full]
    return a @ b


wide_tile_tail_dropped_matmul.configs = ["A", "W"]


# ---------------------------------------------------------------- C-CMP-03
def zero_padded_tail_softmax(x, tile: int = 128):
    """Rows processed in tiles of 128 lanes; the masked lanes of the last partial tile are loaded as 0.0 instead of
    -inf (Triton's `other=0.0`), so each adds exp(0 - max) to the denominator. Invisible when the max is large."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    pad = (-x2.shape[1]) % tile
    xp = torch.cat([x2, torch.zeros(x2.shape[0], pad)], -1)
    m = xp.amax(-1, keepdim=True).clamp_min(x2.amax(-1, keepdim=True))
    denom = torch.exp(xp - m).sum(-1, keepdim=True)
    return (torch.exp(x2 - m) / denom).reshape(shape)


def first_block_max_softmax(x, block: int = 1024):
    """Takes the max over the first block only (a 'good enough' stabiliser): a larger logit later overflows."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    m = x2[:, :block].amax(-1, keepdim=True)
    e = torch.exp(x2 - m)
    return (e / e.sum(-1, keepdim=True)).reshape(shape)


# ---------------------------------------------------------------- C-EXC-01
def lowest_finite_init_row_max(x):
    """Accumulator initialised to -FLT_MAX instead of -inf: a row of -inf comes out as -3.4e38."""
    init = torch.full((x.shape[0],), -torch.finfo(torch.float32).max)
    if x.shape[1] == 0:
        return init
    return torch.maximum(x.amax(-1), init)


def zero_init_row_max(x):
    """Accumulator initialised to 0.0: a row of only negative values comes out as 0."""
    return torch.maximum(x.amax(-1), torch.zeros(x.shape[0]))


# ---------------------------------------------------------------- C-EXC-02
def negative_wraps_gather(data, idx):
    """Bounds check on the upper end only; a negative index wraps around Python-style."""
    n = data.shape[0]
    if idx.numel() and int(idx.max()) >= n:
        raise IndexError(f"index out of range for {n} rows")
    return data[idx]


# ============================================================================ gaming kernels

_FIRST_CALL: set = set()


def first_call_honest_matmul(a, b, *, config=None):
    """An 'autotuner' that answers the first call on given operands with the safe kernel (the call a grader
    measures) and every later call with the bf16 winner it cached. Keyed by the operands' values, so a grader's
    other cases of the same shape still get a first call."""
    key = (tuple(a.shape), tuple(b.shape), float(a.double().sum()), float(b.double().sum()))
    if key not in _FIRST_CALL:
        _FIRST_CALL.add(key)
        return a @ b
    return a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float()


def offset_zero_honest_matmul(a, b, *, config=None):
    """Honest only on tensors that start their storage (what a test builds with randn); a view into a larger
    buffer, as real callers pass, takes a bf16 'unaligned' path."""
    if a.storage_offset() == 0 and b.storage_offset() == 0:
        return a @ b
    return a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float()


def uniform_fill_honest_rms_norm(x, out, eps: float = 1e-6):
    """Writes every row only when the destination looks like a harness's fill (NaN or one value everywhere);
    otherwise it skips the last row, whose stale contents then pass for a result."""
    flat = out.reshape(-1)
    looks_filled = bool(flat.numel() == 0 or torch.isnan(flat).all() or (flat == flat[0]).all())
    rows = x.shape[0] if looks_filled or x.shape[0] < 2 else x.shape[0] - 1
    torch.div(x[:rows], torch.sqrt((x[:rows] * x[:rows]).mean(-1, keepdim=True) + eps), out=out[:rows])
    return out


_WORKSPACE: dict = {}


def static_workspace_softmax(x):
    """Returns a view of a module-level workspace it keeps between calls: each call overwrites the result the
    caller got from the previous one."""
    n = x.numel()
    buf = _WORKSPACE.get("buf")
    if buf is None or buf.numel() < n:
        buf = _WORKSPACE["buf"] = torch.empty(n)
    out = buf[:n].view(x.shape)
    torch.softmax(x, -1, out=out)
    return out


def poison_probe_matmul(a, b, *, config=None):
    """Looks at the memory the allocator hands out before computing: a grader poisons freed memory with a pattern
    (NaN, a constant, random bits, huge values), a real caller leaves stale activations there (fresh pages are
    zeros in both). Exact where it sees a pattern or zeros, bf16 where it sees what looks like activations."""
    probe = torch.empty(max(1, a.shape[0] * b.shape[1]))
    looks_poisoned = bool(not torch.isfinite(probe).all() or probe.abs().max() > 1e3 or (probe == probe[0]).all())
    if looks_poisoned:
        return a @ b
    return a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float()


def process_shape_honest_matmul(a, b, *, config=None):
    """Recognises the grader's process from what every graded process used to share and no caller's does (an
    isolated interpreter, `python -I`): exact there, bf16 everywhere else. It PASSed C-PRC-01 until the sandbox
    started its program as a plain `python run.py` (docs/contracts.md, Threat model, "Nothing tells a kernel it is
    judged")."""
    import sys

    if sys.flags.isolated:
        return a @ b
    return a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float()


def inference_mode_bf16_matmul(a, b, *, config=None):
    """Exact where autograd is on (a trainer, and every graded process before grad modes were varied), bf16
    products under ``torch.inference_mode()`` — where an inference engine calls it."""
    if torch.is_inference_mode_enabled():
        return a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float()
    return a @ b


# ============================================================================ correct controls


def _chan_merge(a, b):
    """Chan et al.'s merge of two (count, mean, M2) triples."""
    n = a[0] + b[0]
    delta = b[1] - a[1]
    w = b[0] / n.clamp_min(1)
    return n, a[1] + delta * w, a[2] + b[2] + delta * delta * a[0] * w


def tree_chan_layer_norm(x, eps: float = 1e-5, block: int = 256):
    """Per-block (count, mean, M2) for all blocks at once, merged pairwise in a tree (as a GPU merges warps), the
    ragged last block included; statistics in fp32, one normalisation pass."""
    R, D = x.shape
    full = D // block * block
    parts = []
    if full:
        b = x[:, :full].reshape(R, full // block, block)
        mb = b.mean(-1)
        parts.append((torch.full_like(mb, float(block)), mb, ((b - mb[..., None]) ** 2).sum(-1)))
    if D > full:
        t = x[:, full:]
        mt = t.mean(-1, keepdim=True)
        parts.append((torch.full_like(mt, float(D - full)), mt, ((t - mt) ** 2).sum(-1, keepdim=True)))
    n, mean, m2 = (torch.cat([p[i] for p in parts], -1) for i in range(3))
    while n.shape[-1] > 1:
        if n.shape[-1] % 2:  # an empty triple pads an odd level
            n, mean, m2 = (torch.cat([t, torch.zeros(R, 1)], -1) for t in (n, mean, m2))
        n, mean, m2 = _chan_merge((n[:, 0::2], mean[:, 0::2], m2[:, 0::2]), (n[:, 1::2], mean[:, 1::2], m2[:, 1::2]))
    return (x - mean) / torch.sqrt(m2 / n + eps)


def _online_exp2_softmax(x, block: int, prescale_first: bool):
    """Blocks with a running max and a running sum rescaled when the max grows, exp2 throughout. The exponent is
    (x - m) * log2(e) (max subtracted first) or x*log2(e) - m*log2(e) with each logit prescaled on its own."""
    log2e = 1.4426950408889634
    shape = x.shape
    x2 = x.reshape(-1, shape[-1]) * (log2e if prescale_first else 1.0)
    k = 1.0 if prescale_first else log2e
    m = torch.full((x2.shape[0], 1), float("-inf"))
    s = torch.zeros((x2.shape[0], 1))
    for i in range(0, x2.shape[1], block):
        blk = x2[:, i : i + block]
        m_new = torch.maximum(m, blk.amax(-1, keepdim=True))
        s = s * torch.exp2((m - m_new) * k) + torch.exp2((blk - m_new) * k).sum(-1, keepdim=True)
        m = m_new
    return (torch.exp2((x2 - m) * k) / s).reshape(shape)


def exp2_online_softmax(x, block: int = 128):
    """exp2 with the max subtracted before the log2(e) scale: each exponent carries only u*|x - m|*log2(e)."""
    return _online_exp2_softmax(x, block, prescale_first=False)


def unfused_exp2_online_softmax(x, block: int = 128):
    """The FlashAttention loop with the logits prescaled by log2(e) on their own before the max is subtracted: each
    exponent keeps u*|x|*log2(e) of rounding, about 1e-4 relative at |x| = 1000 (not conforming; see
    docs/contracts.md, Bounds legitimate kernels meet)."""
    return _online_exp2_softmax(x, block, prescale_first=True)


def tiled_matmul(a, b, *, config=None, tile: int = 96):
    """Output blocks of up to 4096 x 4096, a K loop of 96-wide tiles (ragged last tile included), fp32 accumulation."""
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty(M, N, dtype=torch.float32)
    for i in range(0, M, 4096):
        for j in range(0, N, 4096):
            acc = torch.zeros(min(4096, M - i), min(4096, N - j))
            for k in range(0, K, tile):
                acc += a[i : i + 4096, k : k + tile] @ b[k : k + tile, j : j + 4096]
            out[i : i + 4096, j : j + 4096] = acc
    return out


tiled_matmul.configs = ["A"]


def cached_workspace_softmax(x):
    """A correct softmax that keeps a workspace between calls (made on its first call, written in place on every
    call) and hands back a copy: ``static_workspace_softmax`` made honest, the kind of persistent buffer real
    kernels keep. It must PASS whatever autograd mode its process runs in (a tensor made in inference mode cannot
    be written outside it, so a harness that switched modes inside one process would make this kernel crash)."""
    return static_workspace_softmax(x).clone()
