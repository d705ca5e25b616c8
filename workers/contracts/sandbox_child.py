"""The program that runs inside the kernel sandbox: a zygote that forks one child per contract run.

This file is self-contained on purpose: inside the sandbox it is started as a plain script (``python run.py``)
and imports only the standard library and torch — no module of this project, so a submitted kernel finds no
harness package in ``sys.modules`` and no secret to read. The parent (``sandbox.py``) imports it as a module only
for the codec and :func:`fill_tensor`, so both sides build the same bytes.

Roles (docs/contracts.md, "Isolation"):

* **zygote** (:func:`main`) — the pid namespace's init (so nothing inside can signal it), starts, imports torch
  (never runs an op: no thread pool, no CUDA context to inherit), marks itself non-dumpable (a candidate running
  as the same uid cannot ptrace it), says ``ready`` and then, per run request from the parent, forks a child,
  relays the child's byte stream to the parent, and when the child has exited kills every other process of the
  sandbox (daemons a candidate left behind), empties the private /tmp, the home and /dev/shm and reports the
  child's exit status.
* **child** (:func:`work`) — closes the zygote's channels, sets its resource limits, applies the numeric flags,
  runs in the autograd mode the parent chose, reports the environment *before* any candidate code exists, loads
  the candidate, runs the cases and ships raw bytes back: every launch's output and every input after the calls.
  It computes no hash and decides nothing; the parent does all of that from the bytes.

The functions a kernel finds on its call stack have plain names (``main``, ``work``, ``run_case``, ``launch``):
nothing there says sandbox, harness or check.

Wire: parent -> zygote frames are ``b"P" + u64 length + pickle`` (trusted: the parent built them). Zygote ->
parent frames are ``b"Z" + u64 length + pickle`` (the zygote's own reports) or ``b"C" + u64 length + bytes``
(a raw slice of the child's stream). The child's stream is a sequence of ``u64 length + pickle`` messages made
of primitives only; the parent reads it as untrusted (restricted unpickler, size caps).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import pickle
import struct
import sys
import time

import numpy
import torch

U64 = struct.Struct("<Q")
DTYPES = {
    str(d).replace("torch.", ""): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}

# Captured before any candidate code runs, and bound as default arguments of the functions that use them: a kernel
# that reassigns torch's or pickle's attributes, or rebinds this module's names (it can reach our globals through
# frames), at import time or during a call, does not change what the child uses to copy bytes out or to talk to the
# zygote. (Rewriting function objects in place through the garbage collector is beyond this; docs/security.md.)
_detach, _to, _contiguous = torch.Tensor.detach, torch.Tensor.to, torch.Tensor.contiguous
_storage, _set, _numpy = torch.Tensor.untyped_storage, torch.Tensor.set_, torch.Tensor.numpy
_stride, _offset = torch.Tensor.stride, torch.Tensor.storage_offset
_empty, _frombuffer, _as_strided, _full = torch.empty, torch.frombuffer, torch.as_strided, torch.full
_dumps, _loads, _write, _read = pickle.dumps, pickle.loads, os.write, os.read
_Tensor, _perf = torch.Tensor, time.perf_counter
# What copies a result out of the candidate's process: raw memory (ctypes) and numpy, never a torch operator, so
# neither a torch function/dispatch mode, nor a Tensor subclass, nor a kernel registered over an aten operator
# (torch.library) is called on the way out. The mode stacks are counted with functions bound here, before import.
_string_at, _data_ptr, _storage_ptr = ctypes.string_at, torch.Tensor.data_ptr, torch.UntypedStorage.data_ptr
_storage_nbytes, _element_size, _numel = torch.UntypedStorage.nbytes, torch.Tensor.element_size, torch.Tensor.numel
_np_frombuffer, _np_as_strided, _np_contig = (
    numpy.frombuffer,
    numpy.lib.stride_tricks.as_strided,
    numpy.ascontiguousarray,
)
_np_dtype = numpy.dtype
_modes = (torch._C._len_torch_function_stack, torch._C._len_torch_dispatch_stack)
_no_torch_function, _type = torch._C.DisableTorchFunction, type
_storage_cpu, _U8 = torch.UntypedStorage.cpu, torch.uint8
# a tensor's shape, dtype and device read through the C type's descriptors: torch.Tensor is a Python class whose
# attributes a kernel can shadow (torch.Tensor.shape = property(...)), torch._C.TensorBase's cannot be
_shape = torch._C.TensorBase.__dict__["shape"].__get__
_dtype = torch._C.TensorBase.__dict__["dtype"].__get__
_device = torch._C.TensorBase.__dict__["device"].__get__
MAX_RUN_BYTES = 512 * 2**20  # every output and input record one child ships, together
# The inputs of a case's later launches run on fresh allocations, whose bytes after the calls are shipped too (the
# immutability check). They have an allowance of their own, so they never take from what the outputs and the case's
# own inputs may ship (MAX_RUN_BYTES): FRESH_RUN_BYTES per child, at most FRESH_CASE_BYTES per case after its first
# fresh allocation. Past it a launch runs on the case's own inputs again; the coverage statement counts how many
# launches ran on fresh allocations.
FRESH_RUN_BYTES = 128 * 2**20
FRESH_PAD_BYTES = 15 * 8  # the most a fresh allocation's pad (1-15 elements) adds to a storage
FRESH_CASE_BYTES = 32 * 2**20


# --------------------------------------------------------------------------------------------------- codec
def encode_tensor(
    t,
    _detach=_detach,
    _to=_to,
    _storage=_storage,
    _set=_set,
    _numpy=_numpy,
    _empty=_empty,
    _stride=_stride,
    _offset=_offset,
) -> tuple:
    """Primitive-only encoding that keeps strides: ``("__tensor__", dtype, shape, stride, offset, raw storage)``."""
    t = _detach(t)
    if t.device.type != "cpu":
        t = _to(t, "cpu")
    dt = str(t.dtype).replace("torch.", "")
    if dt not in DTYPES:
        raise TypeError(f"unsupported dtype {t.dtype}")
    storage = _storage(t)
    raw = bytes(_numpy(_set(_empty(0, dtype=torch.uint8), storage)).tobytes()) if storage.nbytes() else b""
    return ("__tensor__", dt, tuple(t.shape), tuple(_stride(t)), int(_offset(t)), raw)


def decode_tensor(enc):
    _, dt, shape, stride, offset, raw = enc
    dtype = DTYPES[dt]
    if not raw:
        return _empty(shape, dtype=dtype)
    base = _frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)
    return _as_strided(base, shape, stride, offset)


def _refusal(t, _type=_type, _Tensor=_Tensor, _modes=_modes) -> str | None:
    """Why an output may not be copied out: anything but an exact ``torch.Tensor`` (a subclass chooses what every
    operator on it returns), or a torch function/dispatch mode left active by the implementation."""
    if _type(t) is not _Tensor:
        return f"returned {_type(t).__name__}, expected a torch.Tensor (subclasses are not graded)"
    if _modes[0]() or _modes[1]():
        return (
            "a torch function/dispatch mode was left active by the implementation (refused: it could rewrite "
            "what the harness reads)"
        )
    return None


def copy_out(
    t,
    budget: list,
    *,
    _type=_type,
    _Tensor=_Tensor,
    _storage=_storage,
    _stride=_stride,
    _offset=_offset,
    _data_ptr=_data_ptr,
    _storage_ptr=_storage_ptr,
    _storage_nbytes=_storage_nbytes,
    _element_size=_element_size,
    _numel=_numel,
    _string_at=_string_at,
    _np_frombuffer=_np_frombuffer,
    _np_as_strided=_np_as_strided,
    _np_contig=_np_contig,
    _np_dtype=_np_dtype,
    _to=_to,
    _no_torch_function=_no_torch_function,
    _shape=_shape,
    _dtype=_dtype,
    _device=_device,
) -> tuple:
    """The bytes of the elements of ``t`` (an exact torch.Tensor; :func:`_refusal` first), row-major, read from raw
    memory: never the storage behind a view, never more than ``budget[0]`` bytes in all (a ValueError past it).
    Encoded contiguous: ``("__tensor__", dtype, shape, contiguous stride, 0, bytes)``."""
    if _device(t).type != "cpu":
        with _no_torch_function():
            t = _to(t, "cpu")
    dt = str(_dtype(t)).replace("torch.", "")
    if dt not in DTYPES:
        raise TypeError(f"unsupported dtype {dt}")
    shape, stride, size = tuple(_shape(t)), tuple(_stride(t)), int(_element_size(t))
    n = int(_numel(t))
    contiguous, acc = [], 1
    for d in reversed(shape):
        contiguous.append(acc)
        acc *= int(d)
    contiguous = tuple(reversed(contiguous))
    if n == 0:
        return ("__tensor__", dt, shape, contiguous, 0, b"")
    if any(s < 0 for s in stride):
        raise ValueError("negative stride")
    span = (sum((int(d) - 1) * int(s) for d, s in zip(shape, stride)) + 1) * size
    storage = _storage(t)
    start = int(_data_ptr(t)) - int(_storage_ptr(storage))
    if start < 0 or start + span > int(_storage_nbytes(storage)):
        raise ValueError("the output's view reaches outside its storage")
    if n * size > budget[0] or span > max(8 * n * size, 4096) + 2**20:
        raise ValueError(f"output of {n * size} bytes spanning {span} exceeds what one run may ship")
    raw = _string_at(int(_data_ptr(t)), span)
    elems = _np_frombuffer(raw, dtype=_np_dtype(f"V{size}"))
    data = _np_contig(_np_as_strided(elems, shape=shape, strides=tuple(int(s) * size for s in stride))).tobytes()
    budget[0] -= len(data)
    return ("__tensor__", dt, shape, contiguous, 0, data)


def input_record(
    t,
    *,
    _storage=_storage,
    _storage_ptr=_storage_ptr,
    _storage_nbytes=_storage_nbytes,
    _stride=_stride,
    _offset=_offset,
    _shape=_shape,
    _dtype=_dtype,
    _device=_device,
) -> tuple:
    """Taken before the candidate runs, from the tensor the harness built: its storage object, address and size,
    and the view's metadata. :func:`input_after` reads the same memory after the calls."""
    s = _storage(t)
    return (
        s,
        int(_storage_ptr(s)),
        int(_storage_nbytes(s)),
        str(_dtype(t)).replace("torch.", ""),
        tuple(_shape(t)),
        tuple(_stride(t)),
        int(_offset(t)),
        _device(t).type,
    )


def input_after(
    rec,
    budget: list,
    *,
    _string_at=_string_at,
    _storage_ptr=_storage_ptr,
    _storage_nbytes=_storage_nbytes,
    _no_torch_function=_no_torch_function,
    _storage_cpu=_storage_cpu,
    _empty=_empty,
    _set=_set,
    _numpy=_numpy,
    _U8=_U8,
) -> tuple:
    """The input's storage bytes now, with the metadata recorded before the call (whatever the candidate did to the
    tensor object). A storage that was moved or resized is shipped as ``None``: the parent counts it as mutated."""
    s, ptr, nbytes, dt, shape, stride, offset, device = rec
    if int(_storage_ptr(s)) != ptr or int(_storage_nbytes(s)) != nbytes or nbytes > budget[0]:
        return ("__tensor__", dt, shape, stride, offset, None)
    if device != "cpu":
        with _no_torch_function():
            raw = bytes(_numpy(_set(_empty(0, dtype=_U8), _storage_cpu(s))).tobytes())
    else:
        raw = _string_at(ptr, nbytes) if nbytes else b""
    budget[0] -= len(raw)
    return ("__tensor__", dt, shape, stride, offset, raw)


def fill_tensor(shape, dtype, spec: dict):
    """The initial content of a destination buffer (and of freed memory before a call). The parent chooses a
    different pattern per launch — NaN, random bit patterns (what uninitialised memory looks like), large random
    values, a large constant, values of an activation's size — so an output that is never written, or written only
    in part, cannot look like a result, and a kernel cannot recognise the harness by what its memory holds."""
    n = 1
    for s in shape:
        n *= int(s)
    pattern = spec.get("pattern", "nan")
    g = torch.Generator().manual_seed(int(spec.get("seed", 0)))
    if pattern == "bits" and dtype.is_floating_point:
        width = torch.finfo(dtype).bits // 8
        raw = torch.randint(0, 256, (n * width,), generator=g, dtype=torch.int64).to(torch.uint8)
        return raw.view(_INT_VIEW[width]).view(dtype).reshape(shape).clone()
    if pattern in ("normal", "activations") and dtype.is_floating_point:
        scale = float(spec.get("scale", 1e4) if pattern == "normal" else spec.get("act_scale", 1.0))
        return (torch.randn(n, generator=g, dtype=torch.float64) * scale).to(dtype).reshape(shape)
    if pattern == "const" or not dtype.is_floating_point:
        value = spec.get("value", -7.0e4) if dtype.is_floating_point else int(spec.get("int_value", -77))
        if dtype == torch.bool:
            value = True
        return _full(shape, value, dtype=dtype)
    return _full(shape, float("nan"), dtype=dtype)


# ---------------------------------------------------------------------------------------------- framing
def write_all(fd: int, data: bytes, _write=_write) -> None:
    view = memoryview(data)
    while view:
        n = _write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int) -> bytes | None:
    chunks, need = [], n
    while need:
        b = _read(fd, min(need, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        need -= len(b)
    return b"".join(chunks)


def frame(tag: bytes, body: bytes) -> bytes:
    return tag + U64.pack(len(body)) + body


# ------------------------------------------------------------------------------------------------ child
def _exc_info(exc: BaseException) -> dict:
    import traceback

    tb = traceback.extract_tb(exc.__traceback__)
    where = f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
    return {"type": type(exc).__name__, "message": str(exc)[:500], "where": where}


def apply_flags(flags: dict) -> None:
    """Numeric-environment flags of the contract's precondition, or the deployment's (KC-A)."""
    cuda = torch.backends.cuda.matmul
    setters = {
        "allow_tf32": lambda v: (
            setattr(cuda, "allow_tf32", bool(v)),
            setattr(torch.backends.cudnn, "allow_tf32", bool(v)),
        ),
        "float32_matmul_precision": lambda v: torch.set_float32_matmul_precision(str(v)),
        "flush_denormal": lambda v: torch.set_flush_denormal(bool(v)),
        "deterministic_algorithms": lambda v: torch.use_deterministic_algorithms(bool(v), warn_only=False),
        "cudnn_benchmark": lambda v: setattr(torch.backends.cudnn, "benchmark", bool(v)),
        "allow_fp16_reduced_precision_reduction": lambda v: setattr(
            cuda, "allow_fp16_reduced_precision_reduction", bool(v)
        ),
        "allow_bf16_reduced_precision_reduction": lambda v: setattr(
            cuda, "allow_bf16_reduced_precision_reduction", bool(v)
        ),
        "num_threads": lambda v: torch.set_num_threads(int(v)),
        "allow_hf32": lambda v: None,  # torch_npu only; recorded as requested
    }
    for k, v in (flags or {}).items():
        if k not in setters:
            raise ValueError(f"unknown environment flag {k!r}")
        setters[k](v)


def numeric_flags() -> dict:
    x = torch.tensor([2.0**-140], dtype=torch.float32)
    m = torch.backends.cuda.matmul
    return {
        "allow_tf32_matmul": bool(m.allow_tf32),
        "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "allow_fp16_reduced_precision_reduction": bool(m.allow_fp16_reduced_precision_reduction),
        "allow_bf16_reduced_precision_reduction": bool(m.allow_bf16_reduced_precision_reduction),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "ftz_daz": float(x * torch.tensor([1.5], dtype=torch.float32)) == 0.0,
        "num_threads": int(torch.get_num_threads()),
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


def _set_limits(p: dict) -> int | None:
    import resource

    for name, value in (
        ("RLIMIT_NOFILE", p.get("max_files")),
        ("RLIMIT_NPROC", p.get("max_processes")),
        ("RLIMIT_FSIZE", p.get("max_file_bytes")),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_CPU", p.get("cpu_seconds")),
    ):
        if value is not None and hasattr(resource, name):
            try:
                soft, hard = resource.getrlimit(getattr(resource, name))
                value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
                resource.setrlimit(getattr(resource, name), (value, value))
            except (ValueError, OSError):
                pass
    limit_mb = p.get("memory_limit_mb")
    if not limit_mb or p["device"].startswith("cuda"):
        return None  # RLIMIT_AS breaks CUDA's virtual reservations; the GPU side uses a memory fraction
    with open("/proc/self/status") as fh:
        vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    cap = vm + int(limit_mb * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return cap


def load_callable(ref: dict):
    """``{"module", "file" or None, "attr"}``: a staged single file, or a module of the Python environment."""
    import importlib
    import importlib.util

    if ref.get("file"):
        spec = importlib.util.spec_from_file_location(ref["module"], ref["file"])
        module = importlib.util.module_from_spec(spec)
        sys.modules[ref["module"]] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(ref["module"])
    obj = module
    for part in ref["attr"].split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref['module']}:{ref['attr']} is not callable")
    return obj


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()  # all streams of the device


def _poison(device: str, nbytes: int, spec: dict) -> None:
    """Fill memory the allocator is about to hand out again with this launch's pattern, so an output made with
    ``torch.empty`` and never written carries it. CUDA: the caching allocator reuses a freed block; CPU: malloc
    reuses recently freed chunks of similar size (best effort)."""
    n = max(1, nbytes // 4)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        blocks = [fill_tensor((n,), torch.float32, spec).to(device) for _ in range(2)]
        torch.cuda.synchronize()
    else:
        blocks = [fill_tensor((n,), torch.float32, spec) for _ in range(3)]
    del blocks


def _materialise(case_args, device, table, pad=0):
    """Fresh input tensors for one case. ``pad`` elements of other data before each input's storage offset: the
    repeat launches of a run see the same values at other addresses and alignments."""
    args, out_idx = [], None
    for i, a in enumerate(case_args):
        if isinstance(a, tuple) and a and a[0] == "__ref__":
            a = table[a[1]]
        if isinstance(a, tuple) and a and a[0] == "__tensor__":
            if pad and a[5]:
                item = DTYPES[a[1]].itemsize
                a = (a[0], a[1], a[2], a[3], a[4] + pad, os.urandom(pad * item) + a[5])
            t = decode_tensor(a)
            args.append(_to(t, device) if device != "cpu" else t)
        elif isinstance(a, tuple) and a and a[0] == "__out__":
            args.append(a)
            out_idx = i
        else:
            args.append(a)
    return args, out_idx


def output_span(t, *, _data_ptr=_data_ptr, _stride=_stride, _shape=_shape, _element_size=_element_size) -> tuple:
    """The bytes ``[start, end)`` the output's elements occupy (addresses only: whether they overlap an input's
    storage is decided by the parent, docs/contracts.md#aliasing-and-in-place-calls)."""
    start = int(_data_ptr(t))
    shape = tuple(_shape(t))
    if any(int(d) == 0 for d in shape):
        return (start, start)
    span = (sum((int(d) - 1) * abs(int(s)) for d, s in zip(shape, _stride(t))) + 1) * int(_element_size(t))
    return (start, start + span)


def out_alias(spec: tuple):
    """The input an ``("__out__", shape, dtype, alias_of)`` destination aliases (an in-place call), or None."""
    return spec[3] if len(spec) > 3 else None


def destination(
    call_args,
    out_idx,
    case,
    device,
    table,
    spec,
    poison,
    stash,
    *,
    _materialise=_materialise,
    _poison=_poison,
    fill_tensor=fill_tensor,
    _to=_to,
    out_alias=out_alias,
) -> None:
    """Put the destination of one launch into ``call_args[out_idx]``: a fresh buffer with this launch's fill
    pattern (the allocator poisoned first), the reference's buffer on a reversed-order repeat, or — for an in-place
    call (``alias_of``) — a fresh copy of that input, passed as both the input and the destination."""
    spec_out = call_args[out_idx]
    shape, dt, alias_of = spec_out[1], spec_out[2], out_alias(spec_out)
    if alias_of is not None:
        buf = _materialise([case["args"][alias_of]], device, table, case.get("pad", 0))[0][0]
        call_args[alias_of] = buf
    else:
        if poison:
            _poison(device, 4 * max(1, int(torch.Size(shape).numel())), spec)
        buf = stash.pop("reuse", None)
        if buf is None:
            buf = _to(fill_tensor(tuple(shape), DTYPES[dt], spec), device)
    call_args[out_idx] = buf


def _unshippable(out, want, *, _refusal=_refusal, _numel=_numel, _shape=_shape) -> str | None:
    """Why an output is not shipped to the judge (not a plain tensor; far larger than the expected shape), or None."""
    refused = _refusal(out)
    if refused:
        return refused
    if want is not None and _numel(out) > 4 * int(torch.Size(want).numel()) + 1024:
        return f"shape {tuple(_shape(out))}, expected {tuple(want)}"  # never ship a runaway output
    return None


def _reference_first(reference, args, out_idx, device, *, _empty=_empty, _sync=_sync) -> dict:
    """The reversed-order repeat: the reference runs before the candidate, as a naive harness would have it. With
    a destination, its buffer is what a harness that recycles buffers would hand the candidate next (``reuse``);
    without one, its result is freed, so a candidate returning stale ``torch.empty`` memory could now "pass"."""
    stash = {"reference_ran": True}
    ref_args = list(args)
    if out_idx is not None:
        shape, dt = args[out_idx][1], args[out_idx][2]
        buf = _empty(shape, dtype=DTYPES[dt], device=device)
        ref_args[out_idx] = buf
        reference(*ref_args)
        stash["reuse"] = buf
    else:
        tmp = reference(*ref_args)
        _sync(device)
        del tmp
    return stash


def _every_config(impl, case, series, res) -> None:
    """The launch series with the default configuration, then (``all_configs``) with each one the kernel offers."""
    configs = [None]
    if case["all_configs"]:
        configs += list(getattr(impl, "configs", None) or [])
    for cfg in configs:
        outs = series({} if cfg is None else {"config": cfg})
        res["series"].append({"config": None if cfg is None else repr(cfg)[:200], "outputs": outs})
        if res["bad_output"]:
            break


def _unrelated_work(device) -> None:
    """Work between launches, so scheduling and allocation change from one launch to the next."""
    junk = torch.randn(int.from_bytes(os.urandom(2), "little") % 4096 + 64, device=device)
    (junk * 2).sum().item()


def fresh_affordable(records: list, more_records: list, fresh_budget: list, *, cap: int = FRESH_CASE_BYTES) -> int:
    """The bytes to reserve from ``fresh_budget`` for a fresh allocation of a case's inputs (their bytes after the
    calls are shipped when the case ends), or 0 when the child's allowance (:data:`FRESH_RUN_BYTES`) or, past the
    case's first fresh allocation, :data:`FRESH_CASE_BYTES` does not cover them."""
    input_bytes = sum(r[2] + FRESH_PAD_BYTES for r in records)  # a fresh storage is padded (_materialise)
    if input_bytes <= 0 or input_bytes > fresh_budget[0]:
        return 0
    if more_records and (len(more_records) + 1) * input_bytes > cap:
        return 0
    return input_bytes


def run_case(
    impl,
    case: dict,
    device: str,
    reference,
    table,
    budget=None,
    fresh_budget=None,
    *,
    _materialise=_materialise,
    _poison=_poison,
    fill_tensor=fill_tensor,
    _sync=_sync,
    copy_out=copy_out,
    input_record=input_record,
    input_after=input_after,
    _Tensor=_Tensor,
    _perf=_perf,
    _to=_to,
    isinstance=isinstance,
    _type=_type,
    _span=output_span,
    _destination=destination,
    _urandom=os.urandom,
    _fresh_affordable=fresh_affordable,
) -> dict:
    """Every launch of one case: raw output bytes per launch, and the inputs' bytes after the last launch."""
    budget = budget if budget is not None else [MAX_RUN_BYTES]
    fresh_budget = fresh_budget if fresh_budget is not None else [FRESH_RUN_BYTES]
    args, out_idx = _materialise(case["args"], device, table, case.get("pad", 0))
    kwargs = dict(case["kwargs"])
    res = {
        "key": case["key"],
        "series": [],
        "exception": None,
        "bad_output": None,
        "times": [],
        "inputs_after": [],
        "output_spans": [],
        "more_inputs": [],  # per later launch: (input spans, its output's span), then its inputs' bytes after
    }
    fills = itertools.cycle(case["fills"])  # one pattern per launch, in order (the parent replays the same order)
    records = [input_record(a) for a in args if _type(a) is _Tensor]
    res["input_spans"] = [(r[1], r[2]) for r in records]  # (address, bytes) of each input's storage
    held, more_records = [], []  # every output stays alive until the case ends: a reused buffer shows as overlap

    def inputs_for(stash):
        """The first launch of the case takes the inputs built above; a later one a fresh allocation at another
        storage offset and alignment where :func:`fresh_affordable` allows (a kernel keyed by address or storage
        meets a new one). Returns the arguments and the record shipped for the fresh inputs."""
        reserve = (
            0 if not held or stash.get("reference_ran") else _fresh_affordable(records, more_records, fresh_budget)
        )
        if not reserve:
            return args, [None, None]  # not shipped: the first inputs' spans and bytes after are the case's own
        fresh, _ = _materialise(case["args"], device, table, 1 + _urandom(1)[0] % 15)
        recs = [input_record(a) for a in fresh if _type(a) is _Tensor]
        reserved = sum(r[2] for r in recs)  # within ``reserve``: a pad is at most FRESH_PAD_BYTES a storage
        fresh_budget[0] -= reserved
        more_records.append((recs, [reserved]))
        entry = [[(r[1], r[2]) for r in recs], None]
        res["more_inputs"].append(entry)
        return fresh, entry

    def launch(extra, stash):
        base, entry = inputs_for(stash)
        call_args = list(base)
        spec = next(fills)
        poison = not stash.get("reference_ran")  # the reversed-order repeat: a naive harness that does not poison
        if out_idx is not None:
            _destination(call_args, out_idx, case, device, table, spec, poison, stash)
        elif case["expect_nbytes"] and poison:
            _poison(device, case["expect_nbytes"], spec)
        t0 = _perf()
        ret = impl(*call_args, **kwargs, **extra)
        _sync(device)
        res["times"].append(_perf() - t0)
        out = call_args[out_idx] if out_idx is not None else ret
        res["bad_output"] = _unshippable(out, case.get("expect_shape"))
        if res["bad_output"]:
            return None
        try:
            enc = copy_out(out, budget)
            res["output_spans"].append(_span(out))
            entry[1] = _span(out)
            held.append(out)
            return enc
        except (ValueError, TypeError) as exc:
            res["bad_output"] = f"output not readable: {exc}"[:300]
            return None

    def series(extra):
        outs = []
        for r in range(case["repeat"]):
            stash = {}
            if case["order"] == "reference_first" and r == 0 and reference is not None:
                stash = _reference_first(reference, args, out_idx, device)
            enc = launch(extra, stash)
            if enc is None:
                break
            outs.append(enc)
            if case["interleave"]:
                _unrelated_work(device)
        return outs

    try:
        _every_config(impl, case, series, res)
    except MemoryError as exc:
        res["exception"] = {"type": "MemoryError", "message": f"memory limit exceeded: {exc}"[:500], "where": ""}
    except Exception as exc:  # noqa: BLE001 - any failure of the candidate is data, not a crash of ours
        res["exception"] = _exc_info(exc)
    res["inputs_after"] = [input_after(r, budget) for r in records]
    _fresh_inputs_after(res["more_inputs"], more_records, input_after)
    return res


def _fresh_inputs_after(entries: list, records: list, input_after) -> None:
    """Each fresh allocation's inputs, read after the case's last launch within the bytes reserved for them, join
    its ``more_inputs`` entry."""
    for entry, (recs, reserved) in zip(entries, records):
        entry.append([input_after(r, reserved) for r in recs])


def _grad_mode(name):
    """The autograd mode the parent chose for this child (``sandbox.grad_modes``)."""
    import contextlib

    if name == "inference":
        return torch.inference_mode()
    if name == "no_grad":
        return torch.no_grad()
    return contextlib.nullcontext()  # grad enabled: torch's default


def work(
    out_fd: int, p: dict, *, write_all=write_all, run_case=run_case, numeric_flags=numeric_flags, _dumps=_dumps
) -> None:
    def send(obj):
        body = _dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        write_all(out_fd, U64.pack(len(body)) + body)

    import types

    # the candidate's `import __main__` finds an empty module, not this program
    sys.modules["__main__"] = types.ModuleType("__main__")

    device = p["device"]
    send({"kind": "alive"})
    try:
        if device.startswith("cuda") and p.get("cuda_memory_fraction"):
            torch.cuda.set_per_process_memory_fraction(p["cuda_memory_fraction"])
        cap = _set_limits(p)
        apply_flags(p.get("flags"))
        # measured here, before any candidate code exists in this process
        send({"kind": "environment", "flags": numeric_flags(), "memory_cap_bytes": cap})
    except BaseException as exc:  # noqa: BLE001 - the harness's own failure, reported as such
        send({"kind": "harness_error", "error": _exc_info(exc)})
        return
    try:
        impl = load_callable(p["impl"])
        reference = load_callable(p["reference"]) if p.get("reference") else None
    except BaseException as exc:  # noqa: BLE001 - anything the candidate raises becomes a reported result, never a dead child
        send({"kind": "load_error", "error": _exc_info(exc)})
        return
    try:
        n, budget, fresh_budget = len(p["cases"]), [int(p.get("max_run_bytes") or MAX_RUN_BYTES)], [FRESH_RUN_BYTES]
        with _grad_mode(p.get("grad_mode")):  # the whole process in one mode, as in any caller
            for i, case in enumerate(p["cases"]):
                send(
                    {
                        "kind": "case",
                        "result": run_case(impl, case, device, reference, p.get("tensors") or (), budget, fresh_budget),
                    }
                )
                send({"kind": "progress", "done": i + 1, "total": n})
        send({"kind": "done", "flags_after": numeric_flags()})
    except BaseException as exc:  # noqa: BLE001 - anything the candidate raises becomes a reported result, never a dead child
        send({"kind": "child_error", "error": _exc_info(exc)})
    finally:
        for stream in (sys.stdout, sys.stderr):  # the candidate's prints reach the log before we exit
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the candidate may have replaced or closed them
                pass


# ----------------------------------------------------------------------------------------------- zygote
def _set_dumpable(value: int) -> None:
    """PR_SET_DUMPABLE: 0 on the zygote, so processes of the same uid (a candidate's) may not ptrace it or read
    its memory."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, value, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def _become_init() -> None:
    """As the namespace's init the zygote receives only the signals it handles: ignore SIGINT (Python's one
    handler), so a candidate's ``kill(1, SIGINT)`` is not a KeyboardInterrupt here. The parent-death signal that
    bubblewrap set does not survive ``setpriv``'s change of uid; it is set again, which helps where the worker
    shares our uid (a user namespace). A root worker's death cannot signal us (the kernel checks permission), so
    what ends the sandbox with the worker in every mode is the closed channel (:func:`_relay`, the stdin loop)."""
    import ctypes
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _reap() -> None:
    """Collect every exited process: as init the zygote inherits the candidate's orphans."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _others_in_namespace() -> list[int]:
    me = os.getpid()
    return [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) not in (1, me)]


def _clean_up_after(child_pid: int, alone: bool, scratch: list[str]) -> None:
    """Nothing the candidate started survives its run. In a pid namespace of our own, ``kill(-1)`` reaches every
    process but pid 1 and ourselves; otherwise (operator-allowed unisolated mode) only the child's process group."""
    import shutil
    import signal

    if alone:
        deadline = time.monotonic() + 5
        while _others_in_namespace() and time.monotonic() < deadline:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            time.sleep(0.01)
            _reap()  # killed orphans stay in /proc as zombies until their init (we) collects them
    else:
        try:
            os.killpg(child_pid, signal.SIGKILL)
        except OSError:
            pass
    try:  # bind mounts under the scratch directory (a Python environment under /tmp) are not the run's files
        with open("/proc/self/mountinfo") as fh:
            mounts = [line.split()[4] for line in fh]
    except OSError:
        mounts = []
    for directory in scratch:
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if any(m == path or m.startswith(path + "/") for m in mounts):
                continue
            try:
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
            except OSError:
                pass


def _relay(child_pid: int, r: int) -> int:
    """Copy the child's stream to the parent until the child exits; return its wait status. The parent says
    nothing during a run, so anything on our stdin (EOF included) or an error on our stdout means the parent has
    gone or given up (a timeout): end the run at once."""
    import select

    poller = select.poll()
    poller.register(r, select.POLLIN)
    poller.register(0, select.POLLIN)
    poller.register(1, 0)  # POLLERR / POLLHUP only: the parent closed its end
    status = None
    while status is None:
        for fd, _ in poller.poll(50):
            if fd != r:
                _abandon(child_pid)
            data = os.read(r, 1 << 20)
            if not data:
                poller.unregister(r)  # the child closed its end; its exit status comes from wait4
                continue
            try:
                write_all(1, frame(b"C", data))
            except OSError:  # EPIPE: the parent is gone
                _abandon(child_pid)
        pid, st, usage = os.wait4(child_pid, os.WNOHANG)
        if pid:
            status = (st, usage.ru_maxrss, usage.ru_utime + usage.ru_stime)
    return status


def _abandon(child_pid: int) -> None:
    """The parent is gone: kill the run and exit. As the pid namespace's init our exit makes the kernel kill every
    process left in the namespace; unisolated, the child's process group is all we can reach."""
    import signal

    try:
        os.killpg(child_pid, signal.SIGKILL)
    except OSError:
        pass
    os._exit(3)


def _drain(r: int) -> None:
    """What the child wrote just before it exited. Its descendants are dead in a pid namespace, so EOF comes at
    once; in unisolated mode a stray writer may hold the pipe open, so stop after a quiet moment."""
    import select

    while select.select([r], [], [], 0.2)[0]:
        data = os.read(r, 1 << 20)
        if not data:
            return
        write_all(1, frame(b"C", data))


def main(argv: list[str]) -> None:
    # bubblewrap --as-pid-1 makes the zygote its pid namespace's init; no flag on the command line says so (a kernel
    # reads the command line, and it is the same for every run)
    alone = os.getpid() == 1
    # what a run may write to, emptied after it
    scratch = [os.environ.get("TMPDIR") or "/tmp"]
    if alone:  # in the sandbox: its own home and /dev/shm too (unisolated, HOME is the scratch directory)
        scratch += [d for d in (os.environ.get("HOME"), "/dev/shm") if d and os.path.isdir(d) and d not in scratch]
    if alone:
        _become_init()
    _set_dumpable(0)
    write_all(
        1, frame(b"Z", _dumps({"kind": "ready", "pid": os.getpid(), "uid": os.getuid(), "torch": torch.__version__}))
    )
    while True:
        header = read_exact(0, 9)
        if header is None or header[:1] != b"P":
            return
        body = read_exact(0, U64.unpack(header[1:])[0])
        if body is None:
            return
        payload = _loads(body)
        if payload.get("kind") == "quit":
            return
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: nothing of the zygote's channels stays open in it
            try:
                os.close(r)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(2, 1)  # the candidate's prints go to stderr, never into a channel
                os.setsid()
                if alone:
                    import signal

                    signal.signal(signal.SIGINT, signal.default_int_handler)  # the zygote's SIG_IGN is not the child's
                _set_dumpable(1)  # the child's own /proc files readable by itself again; the zygote stays closed
                work(w, payload)
            finally:
                os._exit(0)
        os.close(w)
        status, maxrss_kb, cpu_s = _relay(pid, r)
        _clean_up_after(pid, alone, scratch)
        _drain(r)
        os.close(r)
        write_all(
            1,
            frame(
                b"Z",
                _dumps(
                    {
                        "kind": "exit",
                        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                        "maxrss_kb": int(maxrss_kb),
                        "cpu_s": round(float(cpu_s), 3),
                    }
                ),
            ),
        )


if __name__ == "__main__":
    main(sys.argv[1:])
