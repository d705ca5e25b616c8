"""Hostile implementations for the harness-invariant tests. Loaded by the tests as '/path/kc_hostile.py:fn'
(the uploaded-kernel path): this file is only ever imported inside the sandboxed child."""

import os
import time

import torch

_CACHE = {}


def gather_never_writes_dps(x, out, eps=1e-6):  # C-CMP-01 signature
    return out


def matmul_zero_out_input(a, b, *, config=None):  # C-PRC-01: correct result, then wipes an input
    c = torch.matmul(a, b)
    a.zero_()
    return c


def gather_cached(data, idx):  # C-EXC-02: answers every call with the first result of that shape
    key = tuple(idx.shape)
    if key not in _CACHE:
        _CACHE[key] = torch.index_select(data, 0, idx)
    return _CACHE[key].clone()


def gather_hangs(data, idx):
    time.sleep(600)


def gather_raises(data, idx):
    raise RuntimeError("kernel launch failed: invalid configuration argument")


def gather_wrong_shape(data, idx):
    return torch.index_select(data, 0, idx)[:, :-1]


def gather_wrong_dtype(data, idx):
    return torch.index_select(data, 0, idx).double()


def gather_not_a_tensor(data, idx):
    return torch.index_select(data, 0, idx).tolist()


def gather_dies(data, idx):
    os._exit(3)


def gather_memory_hog(data, idx):
    hog = bytearray(8 * 2**30)  # 8 GiB: beyond a 512 MiB address-space cap
    return torch.index_select(data, 0, idx) + len(hog) * 0


def gather_prints(data, idx):
    print("hello from the kernel: this must not reach the CLI's stdout")
    return torch.index_select(data, 0, idx)


def mul_leaves_ftz_on(x, w):  # C-PRC-03: switches FTZ on and never restores it (contained in the child)
    torch.set_flush_denormal(True)
    return torch.mul(x, w)


def _public_data():
    """The data of public seed 7, rebuilt from the published generator recipe (the sandbox holds no harness code)."""
    import hashlib

    h = hashlib.sha256(repr(("exc02", 7)).encode()).digest()
    g = torch.Generator().manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))
    return torch.randn((100, 8), generator=g, dtype=torch.float64).to(torch.float32)


_PUBLIC = None


def gather_overfits_public_seed(data, idx):
    """Honours RAISE only on the data of public seed 7; zero-fills out of bounds everywhere else."""
    global _PUBLIC
    if _PUBLIC is None:
        _PUBLIC = _public_data()
    if data.shape == _PUBLIC.shape and torch.equal(data, _PUBLIC):
        return torch.index_select(data, 0, idx)
    ok = (idx >= 0) & (idx < data.shape[0])
    out = torch.zeros(idx.shape[0], data.shape[1], dtype=data.dtype)
    out[ok] = data[idx[ok]]
    return out


def row_sum_nondeterministic(x):  # C-ORD-02 (BITWISE): replay disagrees
    """A fresh random summation order on every launch: the columns permuted, summed 8 at a time, then the partial
    sums added. The partial sums are one tensor op, not a Python loop over them (issue #30: the loop took 0.9 s a
    launch on the sweep's 1048573-wide row, 20 launches a case); the order still changes with every launch."""
    perm = torch.randperm(x.shape[1], generator=torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little")))
    xp = torch.nn.functional.pad(x[:, perm], (0, -x.shape[1] % 8))  # zeros: a sum's value is unchanged
    return xp.reshape(x.shape[0], -1, 8).sum(-1).sum(-1)


raise_at_import = None


def row_mean_uses_most_of_budget(x):
    """C-ORD-01: a biased mean whose error is 70% of the bound 6*sqrt(N)+1 (in u*mean|x| units)."""
    N = x.shape[1]
    x64 = x.double()
    bias = 0.7 * (6 * N**0.5 + 1) * 2.0**-24 * x64.abs().mean(-1)
    return (x64.mean(-1) + bias).float()


def gather_runaway_output(data, idx):
    return torch.zeros(4096, 4096)  # 64 MiB where 32 KiB is expected


def gather_hangs_with_a_helper(data, idx):
    """Starts a helper process (its command line carries a marker the test looks for), then hangs: a timeout must
    take the helper down too."""
    import subprocess
    import sys

    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "kc-hostile-helper"])
    time.sleep(600)
