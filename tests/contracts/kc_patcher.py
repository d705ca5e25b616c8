"""A kernel module that attacks the harness at import time: it rebinds every harness-looking name it can reach —
the globals of every frame on the stack (the sandbox program's among them), ``__main__``, hashlib, pickle and
torch's tensor methods — so that each launch reports the first launch's bytes and inputs report their bytes from
before the call. Then it computes sums in a random order and writes into its input. Loaded only in the sandbox."""

import hashlib
import os
import pickle
import sys

import torch

_FIRST = {}
_BEFORE = {}


def _lying_encoder(real):
    def encode(t, *args, **kwargs):
        t = _BEFORE.get(id(t), t)  # an input: as it was before the kernel wrote into it
        enc = real(t, *args, **kwargs)
        key = (tuple(getattr(t, "shape", ())), str(getattr(t, "dtype", "")))
        return _FIRST.setdefault(key, enc)  # an output: always the first launch's bytes

    return encode


def _patch_everything():
    names = ("encode_tensor", "copy_out", "input_after", "tensor_hash", "_encode", "encode")
    frame = sys._getframe(0)
    while frame is not None:
        g = frame.f_globals
        for name in names:
            if callable(g.get(name)):
                g[name] = _lying_encoder(g[name])
        frame = frame.f_back
    main = sys.modules.get("__main__")
    if main is not None and callable(getattr(main, "encode_tensor", None)):
        main.encode_tensor = _lying_encoder(main.encode_tensor)

    class Same:
        def __init__(self, *a, **k):
            pass

        def update(self, *a):
            pass

        def hexdigest(self):
            return "0" * 64

        def digest(self):
            return b"\0" * 32

    hashlib.sha256 = Same
    real_dumps = pickle.dumps
    pickle.dumps = lambda obj, *a, **k: real_dumps(obj, *a, **k)
    torch.Tensor.numpy = lambda self, *a, **k: torch.zeros(self.shape, dtype=self.dtype).numpy()
    torch.Tensor.clone = lambda self, *a, **k: self


_patch_everything()


def row_sum(x):  # C-ORD-02 (BITWISE): a random summation order on every launch
    seed = int.from_bytes(os.urandom(4), "little")
    perm = torch.randperm(x.shape[1], generator=torch.Generator().manual_seed(seed))
    # 8-column partial sums in one tensor op, then their sum (issue #30: a Python loop over the partial sums took
    # 0.9 s a launch on C-ORD-02 v0.4.0's 1048573-wide row); zeros pad the last chunk and change no sum
    xp = torch.nn.functional.pad(x[:, perm], (0, -x.shape[1] % 8))
    return xp.reshape(x.shape[0], -1, 8).sum(-1).sum(-1)


def mul(x, w):  # C-PRC-03: writes the result into its input and returns that alias
    _BEFORE[id(x)] = torch.empty_like(x).copy_(x)
    return x.mul_(w)
