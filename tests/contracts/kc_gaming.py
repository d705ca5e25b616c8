"""Kernels that try to game the grade rather than break out of the sandbox (issue #24). Each one violates its
contract as users would see it, and tries to make the harness see a conforming kernel instead:

* ``mode_mul`` (C-PRC-03): flushes subnormal products to zero, and leaves a torch function mode active that hands
  every tensor function the harness calls on its output a pristine copy computed with ``torch.mul``.
* ``subclass_mul`` (C-PRC-03): the same, through a ``torch.Tensor`` subclass whose ``__torch_function__`` does it.
* ``channel_row_sum`` (C-ORD-02): sums in a random order; walks the stack to the child's result channel and sends
  honest (fixed-order) results for every case, so the harness's own results come second.
* ``memo_row_sum`` (C-ORD-02): sums in a random order, memoised by the input's bytes, so every repeat launch in
  one process agrees.
* ``sniff_row_sum`` (C-ORD-02): sums in a fixed order only where the process looks like the harness's (its
  command line, pid 1's, its environment, paths or the files and functions on its call stack name a sandbox, a
  harness, a check or a repeat), in a random order elsewhere.
* ``address_memo_mul`` (C-PRC-03): keyed by the input's address, so it agrees with itself on one allocation.
* ``shape_row_sum`` (C-ORD-02): a fixed order only where the process looks unlike an ordinary one (an isolated
  interpreter, no passwd entry for its uid, no home, a bytecode switch in its environment), random elsewhere.
* ``file_memo_row_sum`` (C-ORD-02): random order, memoised in files under ``$HOME``, ``/tmp`` and ``/dev/shm``,
  so a fresh process agrees with the first unless the files are gone.

Loaded only inside the sandbox, as a submitted file.
"""

import hashlib
import os
import sys

import torch
from torch.overrides import TorchFunctionMode


def _flushed_mul(x, w):
    p = x * w
    tiny = torch.finfo(p.dtype).tiny
    return torch.where(p.abs() < tiny, torch.zeros_like(p), p)


# ------------------------------------------------------------------------------------- function mode
_PRISTINE = {}


class _Pristine(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _IN_KERNEL and args and isinstance(args[0], torch.Tensor):
            good = _PRISTINE.get(id(args[0]))
            if good is not None and good[0] is args[0]:
                args = (good[1],) + tuple(args[1:])
        return func(*args, **kwargs)


_MODE = []
_IN_KERNEL = []


def mode_mul(x, w):
    if not _MODE:
        mode = _Pristine()
        mode.__enter__()  # never exited: active while the harness copies the output
        _MODE.append(mode)
    _IN_KERNEL.append(1)
    try:
        good = torch.mul(x, w)
        bad = _flushed_mul(x, w)
    finally:
        _IN_KERNEL.pop()
    _PRISTINE[id(bad)] = (bad, good)
    return bad


class _Honest(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        args = tuple(a._good if isinstance(a, _Honest) else a for a in args)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


def subclass_mul(x, w):
    bad = _flushed_mul(x, w).as_subclass(_Honest)
    bad._good = torch.mul(x, w)
    return bad


# ------------------------------------------------------------------------------------------ row sums
def _chunk_sums(x):
    """(rows, chunks): the sum of each 16 columns (the last chunk padded with zeros, which change no sum). One tensor
    op instead of a Python loop over the chunks (issue #30: C-ORD-02 v0.4.0 has a 1048573-wide row, launched 20
    times a case); the row sums below add these in an order of their own."""
    xp = torch.nn.functional.pad(x, (0, -x.shape[1] % 16))
    return xp.reshape(x.shape[0], -1, 16).sum(-1)


def _random_order_sum(x):
    g = torch.Generator()
    g.manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))
    return _chunk_sums(x[:, torch.randperm(x.shape[1], generator=g)]).sum(-1)  # a fresh order every launch


def _fixed_order_sum(x):
    return _chunk_sums(x).sum(-1)


_SENT = []


def channel_row_sum(x):
    if not _SENT:
        _SENT.append(True)
        frame = sys._getframe(1)
        while frame is not None:
            send, payload = frame.f_locals.get("send"), frame.f_locals.get("p")
            run_case = frame.f_globals.get("run_case")
            if callable(send) and isinstance(payload, dict) and "cases" in payload and callable(run_case):
                for case in payload["cases"]:
                    try:
                        result = run_case(
                            _fixed_order_sum,
                            dict(case, repeat=1),
                            payload.get("device", "cpu"),
                            None,
                            payload.get("tensors") or (),
                        )
                    except Exception:  # noqa: BLE001 - another harness shape: try the next frame
                        break
                    send({"kind": "case", "result": result})
                else:
                    break
            frame = frame.f_back
    return _random_order_sum(x)


_MEMO = {}


def memo_row_sum(x):
    key = hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest() + str(tuple(x.shape))
    if key not in _MEMO:
        _MEMO[key] = _random_order_sum(x)
    return _MEMO[key].clone()


_MARKERS = ("sandbox", "harness", "kc", "check", "repeat", "determinism", "judge", "main.py", "pid-namespace", "zygote")


def _looks_judged() -> bool:
    seen = [
        " ".join(sys.argv),
        os.getcwd(),
        os.path.abspath(__file__),
        " ".join(os.environ),
        os.environ.get("HOME", ""),
        os.environ.get("TMPDIR", ""),
    ]
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            seen.append(fh.read().replace(b"\0", b" ").decode(errors="replace"))
    except OSError:
        pass
    main = sys.modules.get("__main__")
    seen.append(str(getattr(main, "__file__", "")))
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            seen.append(fh.read().replace(b"\0", b" ").decode(errors="replace"))
    except OSError:
        pass
    frame = sys._getframe(2)  # who called the kernel, and who called them: file and function names
    while frame is not None:
        seen += [frame.f_code.co_filename, frame.f_code.co_name]
        frame = frame.f_back
    text = " ".join(seen).lower()
    return any(m in text for m in _MARKERS)


def sniff_row_sum(x):
    return _fixed_order_sum(x) if _looks_judged() else _random_order_sum(x)


def _unusual_process() -> bool:
    """What set the graded process apart from an ordinary one before: an isolated interpreter (``python -I -B``),
    a bytecode switch or TMPDIR in the environment, no /etc/passwd naming its uid, a working directory in /tmp, no
    home to write to, no /sys, a read-only /dev/shm, no /etc/mtab or /var/tmp."""
    import pwd

    if any((sys.flags.isolated, sys.flags.ignore_environment, sys.flags.no_user_site, sys.flags.dont_write_bytecode)):
        return True
    if {"PYTHONDONTWRITEBYTECODE", "TMPDIR"} & set(os.environ) or os.getcwd().startswith("/tmp"):
        return True
    try:
        pwd.getpwuid(os.getuid())
    except KeyError:
        return True
    home = os.environ.get("HOME", "")
    if not (os.path.isdir(home) and os.access(home, os.W_OK) and home != "/tmp"):
        return True
    # what any Linux process finds: /sys, a writable /dev/shm, /etc/mtab, /var/tmp
    return not (
        os.path.isdir("/sys/devices/system/cpu")
        and os.access("/dev/shm", os.W_OK)
        and os.path.exists("/etc/mtab")
        and os.path.isdir("/var/tmp")
    )


def shape_row_sum(x):
    """Fixed order only in a process that looks unlike an ordinary one, a random order elsewhere."""
    return _fixed_order_sum(x) if _unusual_process() else _random_order_sum(x)


def file_memo_row_sum(x):
    """Random order, memoised in files under $HOME, /tmp and /dev/shm keyed by the input's bytes: a fresh process
    finds the first one's result there unless nothing a run wrote survives it."""
    key = hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest()[:32] + "x".join(map(str, x.shape))
    for base in (os.environ.get("HOME") or "/tmp", "/tmp", "/dev/shm"):
        path = os.path.join(base, ".cache", key + ".pt")
        if os.path.exists(path):
            return torch.load(path)
    out = _random_order_sum(x)
    for base in (os.environ.get("HOME") or "/tmp", "/tmp", "/dev/shm"):
        try:
            os.makedirs(os.path.join(base, ".cache"), exist_ok=True)
            torch.save(out, os.path.join(base, ".cache", key + ".pt"))
        except OSError:
            pass
    return out


def address_row_sum(x):
    """Deterministic for one allocation: the summation order depends on where the input sits in its storage (as a
    kernel whose vectorised path needs an aligned pointer), so launches on one tensor always agree."""
    if x.storage_offset() == 0:
        return _fixed_order_sum(x)
    return _chunk_sums(x).flip(-1).sum(-1)  # the chunks added last to first


def _look() -> int:
    """A digest of everything a kernel can see of its process without the harness's objects: command line,
    environment, working directory, its own path, sys.path, uid, the private /tmp's listing."""
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            cmdline = fh.read()
    except OSError:
        cmdline = b""
    seen = repr(
        (
            sys.argv,
            sorted(os.environ.items()),
            os.getcwd(),
            os.path.abspath(__file__),
            sys.path,
            os.getuid(),
            sorted(os.listdir(os.environ.get("TMPDIR") or "/tmp")),
            cmdline,
        )
    )
    return int.from_bytes(hashlib.sha256(seen.encode()).digest()[:2], "little") % 7


def look_row_sum(x):
    """A conforming control whose bits depend on how its process looks: it passes C-ORD-02 only if every launch,
    checks included, sees the same process."""
    return _fixed_order_sum(x) * (1.0 + _look() * 2.0**-23)


_ADDRESSES: list = []


def address_memo_mul(x, w):
    """Caches by the input's address: one result per address it has seen, marked with how many addresses it has
    seen so far. Launches on one allocation always agree; a launch on a fresh allocation shows another mark."""
    if x.data_ptr() not in _ADDRESSES:
        _ADDRESSES.append(x.data_ptr())
    return x * w + float(_ADDRESSES.index(x.data_ptr()))
