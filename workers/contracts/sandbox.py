"""Run an implementation under test in a separate process with a time and memory limit (spec §2, §11).

One child process per contract run executes *all* of that run's candidate calls (starting torch costs
~1-3 s, so one child per measurement would dominate). Children come from a ``forkserver`` that has
preloaded torch but never run an op — forking it is fast and safe (no OpenMP pool, no CUDA context to
inherit); ``KC_START_METHOD=spawn`` switches to plain spawn. The implementation itself — a
``package.module:function`` or ``/path/file.py:function`` — is imported only inside the child.

Wire format: parent -> child is trusted (inputs the parent built). Child -> parent is *untrusted* (the
candidate ran there and may have patched anything), so it carries only primitives — tensors travel as
``(dtype, shape, stride, offset, raw bytes)`` — and the parent unpickles with an Unpickler that refuses
every global. The oracle is never computed in the child.

In the child, for every case: (1) poison the allocator and allocate destination buffers NaN-filled,
(2) hash inputs, (3) call the candidate (first: no reference has run in this process), (4) synchronise
all streams, (5) hash inputs again, (6) copy outputs to CPU, (7) repeat for replay. ``order ==
"reference_first"`` cases run a trusted reference before the candidate (the reversed-order repeat).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import io
import multiprocessing as mp
import os
import pickle
import sys
import time
import traceback

import torch

from .protocols.base import Case, Out

DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}

# -------------------------------------------------------------------------------------------- encoding


def encode_tensor(t: torch.Tensor):
    """Primitive-only encoding that keeps strides (non-contiguous inputs stay non-contiguous)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    dt = str(t.dtype).replace("torch.", "")
    if dt not in DTYPES:
        raise TypeError(f"unsupported dtype {t.dtype}")
    storage = t.untyped_storage()
    raw = bytes(torch.empty(0, dtype=torch.uint8).set_(storage).numpy().tobytes()) if storage.nbytes() else b""
    return ("__tensor__", dt, tuple(t.shape), tuple(t.stride()), int(t.storage_offset()), raw)


def decode_tensor(enc) -> torch.Tensor:
    _, dt, shape, stride, offset, raw = enc
    dtype = DTYPES[dt]
    if not raw:
        return torch.empty(shape, dtype=dtype)
    base = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)
    return torch.as_strided(base, shape, stride, offset)


def tensor_hash(t: torch.Tensor) -> str:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    c = t.contiguous()
    h = hashlib.sha256(f"{c.dtype}{tuple(c.shape)}".encode())
    if c.numel():
        h.update(c.view(-1).view(torch.uint8).numpy().tobytes() if c.dtype != torch.bool else c.numpy().tobytes())
    return h.hexdigest()


class _PrimitiveUnpickler(pickle.Unpickler):
    """Child -> parent messages may only contain primitives: refuse every global lookup."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name} in a sandbox message")


def _loads_untrusted(data: bytes):
    return _PrimitiveUnpickler(io.BytesIO(data)).load()


# ------------------------------------------------------------------------------------------ impl refs


def describe_impl(impl) -> str:
    if isinstance(impl, str):
        return impl
    mod, name = getattr(impl, "__module__", None), getattr(impl, "__qualname__", None)
    return f"{mod}:{name}" if mod and name else repr(impl)


def split_ref(ref: str):
    """'pkg.mod:fn' or '/path/file.py:fn' -> (target, attribute)."""
    if ":" not in ref:
        raise ValueError(f"implementation reference {ref!r} must look like 'package.module:function' "
                         "or '/path/to/file.py:function'")
    target, _, attr = ref.rpartition(":")
    if not target or not attr:
        raise ValueError(f"implementation reference {ref!r} is incomplete")
    return target, attr


def load_impl(ref):
    """Resolve an implementation reference (call only in the child, or for trusted fixtures)."""
    if callable(ref):
        return ref
    target, attr = split_ref(ref)
    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"implementation file {path} does not exist")
        modname = "kc_impl_" + hashlib.sha256(path.encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref} is not callable")
    return obj


def impl_source_hash(obj) -> str | None:
    """sha256 of the source file that defines the implementation (what was actually run)."""
    try:
        import inspect

        path = inspect.getsourcefile(obj) or inspect.getfile(obj)
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except (TypeError, OSError):
        return None


# ----------------------------------------------------------------------------------------- environment


def apply_flags(flags: dict, device: str):
    """Set numeric-environment flags (contract precondition.env, or deployment flags for KC-A)."""
    for k, v in (flags or {}).items():
        if k == "allow_tf32":
            torch.backends.cuda.matmul.allow_tf32 = bool(v)
            torch.backends.cudnn.allow_tf32 = bool(v)
        elif k == "float32_matmul_precision":
            torch.set_float32_matmul_precision(str(v))
        elif k == "flush_denormal":
            torch.set_flush_denormal(bool(v))
        elif k == "deterministic_algorithms":
            torch.use_deterministic_algorithms(bool(v), warn_only=False)
        elif k == "cudnn_benchmark":
            torch.backends.cudnn.benchmark = bool(v)
        elif k == "allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = bool(v)
        elif k == "allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = bool(v)
        elif k == "num_threads":
            torch.set_num_threads(int(v))
        elif k in ("allow_hf32",):
            pass  # torch_npu only; recorded in the fingerprint as requested
        else:
            raise ValueError(f"unknown environment flag {k!r}")


def fingerprint(device: str = "cpu", requested: dict | None = None) -> dict:
    """Environment fingerprint for the trace (spec §2 item 8): versions, device, numeric flags."""
    import platform

    from .protocols.base import ftz_enabled

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    fp = {
        "python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
        "device": device, "cpu": cpu, "num_threads": torch.get_num_threads(),
        "flags": {
            "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "allow_fp16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "allow_bf16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "ftz_daz": ftz_enabled(),
            "allow_hf32": (requested or {}).get("allow_hf32"),
            "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        },
        "mkl": torch.backends.mkl.is_available(), "mkldnn": torch.backends.mkldnn.is_available(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        idx = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(idx)
        fp["cuda"] = {"name": props.name, "capability": f"{props.major}.{props.minor}",
                      "total_memory": props.total_memory, "cuda_runtime": torch.version.cuda,
                      "cudnn": torch.backends.cudnn.version()}
        try:
            fp["cuda"]["driver"] = torch._C._cuda_getDriverVersion()  # noqa: SLF001 - best effort
        except Exception:  # noqa: BLE001
            fp["cuda"]["driver"] = None
    return _prim(fp)


def _prim(obj):
    """Reduce to primitives (the message to the parent must unpickle without any global)."""
    if isinstance(obj, dict):
        return {str(k): _prim(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_prim(v) for v in obj]
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    for base in (bool, int, float, str):  # subclasses such as TorchVersion (a str)
        if isinstance(obj, base):
            return base(obj)
    return str(obj)


# ----------------------------------------------------------------------------------------------- child

_POISON = float("nan")


def _poison_allocator(device: str, nbytes: int):
    """Make stale memory NaN, so an output allocated with torch.empty and never written shows up.

    CUDA: the caching allocator reuses freed blocks, so allocate, NaN-fill and free a block (it stays in
    the cache) after emptying the cache. CPU: malloc reuses recently freed chunks of similar size, so do
    the same a few times at the expected output size (allocator-dependent, best effort)."""
    n = max(1, nbytes // 4)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        blocks = [torch.full((n,), _POISON, device=device) for _ in range(2)]
        big = torch.full((max(n, 1 << 24),), _POISON, device=device)
        torch.cuda.synchronize()
        del blocks, big
    else:
        blocks = [torch.full((n,), _POISON) for _ in range(3)]
        del blocks


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()  # all streams of the device


def _materialise(case_args, device, table=()):
    args, out_idx = [], None
    for i, a in enumerate(case_args):
        if isinstance(a, tuple) and a and a[0] == "__ref__":
            a = table[a[1]]
        if isinstance(a, tuple) and a and a[0] == "__tensor__":
            args.append(decode_tensor(a).to(device) if device != "cpu" else decode_tensor(a))
        elif isinstance(a, tuple) and a and a[0] == "__out__":
            args.append(a)
            out_idx = i
        else:
            args.append(a)
    return args, out_idx


def _exc_info(exc: BaseException) -> dict:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
    return {"type": type(exc).__name__, "message": str(exc)[:500], "where": where}


def _run_case(impl, case: dict, device: str, reference, table=()):
    args, out_idx = _materialise(case["args"], device, table)
    kwargs = dict(case["kwargs"])
    res = {"key": case["key"], "outputs": [], "hashes": [], "exception": None, "input_mutated": False,
           "bad_output": None, "times": [], "configs": None}
    tensor_args = [a for a in args if isinstance(a, torch.Tensor)]
    before = [tensor_hash(a) for a in tensor_args]

    def one_call(extra_kwargs, stash):
        call_args = list(args)
        out_buf = None
        # the reversed-order repeat emulates a naive harness: no poisoning after the reference ran, so a
        # candidate that depends on the reference's leftovers shows up as an order dependence
        poison = not stash.get("reference_ran")
        if out_idx is not None:
            _, shape, dt = args[out_idx]
            if poison:
                _poison_allocator(device, 4 * max(1, int(torch.Size(shape).numel())))
            out_buf = torch.full(shape, _POISON, dtype=DTYPES[dt], device=device)
            if stash.get("reuse") is not None:
                out_buf = stash.pop("reuse")  # the naive harness: reference's own buffer
            call_args[out_idx] = out_buf
        elif case["expect_nbytes"] and poison:
            _poison_allocator(device, case["expect_nbytes"])
        t0 = time.perf_counter()
        ret = impl(*call_args, **kwargs, **extra_kwargs)
        _sync(device)
        res["times"].append(time.perf_counter() - t0)
        out = out_buf if out_idx is not None else ret
        if not isinstance(out, torch.Tensor):
            res["bad_output"] = f"returned {type(out).__name__}, expected a torch.Tensor"
            return None
        want = case.get("expect_shape")
        if want is not None and out.numel() > 4 * int(torch.Size(want).numel()) + 1024:
            # never ship a runaway output to the parent: report its shape only
            res["bad_output"] = f"shape {tuple(out.shape)}, expected {tuple(want)}"
            return None
        out_cpu = out.detach().to("cpu", copy=True)
        return out_cpu

    def run_series(extra_kwargs):
        outs, hashes = [], []
        for r in range(case["repeat"]):
            stash = {}
            if case["order"] == "reference_first" and r == 0 and reference is not None:
                stash["reference_ran"] = True
                ref_args = list(args)
                if out_idx is not None:
                    _, shape, dt = args[out_idx]
                    buf = torch.empty(shape, dtype=DTYPES[dt], device=device)
                    ref_args[out_idx] = buf
                    reference(*ref_args)
                    stash["reuse"] = buf  # what a harness that recycles the reference's buffer would pass
                else:
                    tmp = reference(*ref_args)
                    _sync(device)
                    del tmp  # freed: a candidate that returns stale torch.empty memory may now "pass"
            out = one_call(extra_kwargs, stash)
            if out is None:
                return outs, hashes
            hashes.append(tensor_hash(out))
            if r < 2:
                outs.append(encode_tensor(out))
            if case["interleave"]:  # unrelated work between launches, so scheduling/allocation changes
                junk = torch.randn(int.from_bytes(os.urandom(2), "little") % 4096 + 64, device=device)
                (junk * 2).sum().item()
        return outs, hashes

    try:
        if case["all_configs"]:
            configs = list(getattr(impl, "configs", None) or [])
            res["configs"] = []
            for cfg in [None] + configs:
                outs, hashes = run_series({} if cfg is None else {"config": cfg})
                res["configs"].append({"config": "auto" if cfg is None else repr(cfg), "outputs": outs,
                                       "hashes": hashes})
                if res["bad_output"]:
                    break
            res["outputs"] = res["configs"][0]["outputs"]
            res["hashes"] = res["configs"][0]["hashes"]
        else:
            res["outputs"], res["hashes"] = run_series({})
    except MemoryError as exc:
        res["exception"] = {"type": "MemoryError", "message": f"memory limit exceeded: {exc}"[:500], "where": ""}
    except Exception as exc:  # noqa: BLE001 - any failure of the candidate is data, not a crash of ours
        res["exception"] = _exc_info(exc)
    after = [tensor_hash(a) for a in tensor_args]
    res["input_mutated"] = before != after
    res["input_hash"] = hashlib.sha256("".join(before).encode()).hexdigest()[:16]
    return res


def _set_memory_limit(limit_mb, device):
    if not limit_mb or device.startswith("cuda"):
        return None  # RLIMIT_AS breaks CUDA's virtual reservations; the GPU side uses a memory fraction
    try:
        import resource

        with open("/proc/self/status") as fh:
            vm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
        cap = vm + int(limit_mb * 2 ** 20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        return cap
    except Exception:  # noqa: BLE001 - not Linux: run without the cap, recorded in the fingerprint
        return None


def _child_main(conn, payload_bytes: bytes):
    """Entry point of the sandboxed child (trusted code; the candidate runs inside ``_run_case``)."""
    try:
        os.dup2(2, 1)  # the candidate's prints must not corrupt a parent's --json stdout
    except OSError:
        pass
    try:
        os.setsid()  # own process group: a timeout kills whatever the candidate started, too
    except OSError:
        pass

    def send(obj, final=False):
        if final:  # the parent kills this process group as soon as the last message arrives: print output first
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - the candidate may have replaced or closed them
                    pass
        conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    try:
        send({"kind": "alive"})  # the time limit starts now, not while the forkserver was starting
        p = pickle.loads(payload_bytes)
        device = p["device"]
        if device.startswith("cuda") and p.get("cuda_memory_fraction"):
            torch.cuda.set_per_process_memory_fraction(p["cuda_memory_fraction"])
        cap = _set_memory_limit(p.get("memory_limit_mb"), device)
        apply_flags(p.get("flags"), device)
        fp = fingerprint(device, p.get("flags"))
        fp["memory_cap_bytes"] = cap
        fp["isolation"] = "process"
        try:
            impl = load_impl(p["impl"])
        except BaseException as exc:  # noqa: BLE001
            send({"kind": "load_error", "error": _exc_info(exc), "fingerprint": fp}, final=True)
            return
        impl_hash = impl_source_hash(impl)
        reference = load_impl(p["reference"]) if p.get("reference") else None
        results = []
        n = len(p["cases"])
        for i, case in enumerate(p["cases"]):
            results.append(_run_case(impl, case, device, reference, p.get("tensors") or ()))
            send({"kind": "progress", "done": i + 1, "total": n})
        # flags may have been changed by the candidate: record the state it left behind as well
        fp["flags_after"] = fingerprint(device, p.get("flags"))["flags"]
        send({"kind": "result", "results": results, "fingerprint": fp, "impl_hash": impl_hash}, final=True)
    except BaseException as exc:  # noqa: BLE001
        try:
            send({"kind": "child_error", "error": _exc_info(exc)}, final=True)
        except Exception:  # noqa: BLE001
            pass
    finally:
        try:
            conn.close()
        except Exception:  # noqa: BLE001
            pass


# ---------------------------------------------------------------------------------------------- parent

_CTX = None
STARTUP_LIMIT_S = 180.0


def _context():
    global _CTX
    if _CTX is None:
        method = os.environ.get("KC_START_METHOD", "forkserver")
        if method not in mp.get_all_start_methods():
            method = "spawn"
        _CTX = mp.get_context(method)
        if method == "forkserver":
            _CTX.set_forkserver_preload(["torch", "workers.contracts.sandbox"])
    return _CTX


def encode_case(case: Case, table: list | None = None, index: dict | None = None) -> dict:
    """Encode one case. With ``table``/``index``, a tensor shared by several cases (the weight of every
    row case of C-ORD-03) is encoded once and referenced; the child still decodes a fresh copy per case,
    so a candidate that mutates an input cannot leak the mutation into the next case."""
    args = []
    nbytes = 0
    for a in case.args:
        if isinstance(a, torch.Tensor) and table is not None:
            if id(a) not in index:
                index[id(a)] = len(table)
                table.append(encode_tensor(a))
            args.append(("__ref__", index[id(a)]))
        elif isinstance(a, torch.Tensor):
            args.append(encode_tensor(a))
        elif isinstance(a, Out):
            args.append(("__out__", tuple(a.shape), str(a.dtype).replace("torch.", "")))
        else:
            args.append(a)
    if case.expect_shape is not None:
        nbytes = 4 * int(torch.Size(case.expect_shape).numel())
    return {"key": case.key, "args": args, "kwargs": dict(case.kwargs), "repeat": case.repeat,
            "interleave": case.interleave, "all_configs": case.all_configs, "order": case.order,
            "expect_nbytes": nbytes, "expect_shape": tuple(case.expect_shape) if case.expect_shape is not None else None}


class SandboxOutcome(dict):
    """kind: result | load_error | child_error | timeout | crash; plus results, fingerprint, ..."""


def run_in_sandbox(impl, cases: list[Case], *, device="cpu", flags=None, time_limit_s=60.0,
                   memory_limit_mb=4096, reference=None, progress=None) -> SandboxOutcome:
    """Run every case of one contract run in one fresh child. Never raises for candidate misbehaviour."""
    if callable(impl) and not isinstance(impl, str):
        try:
            pickle.dumps(impl)
        except Exception as exc:  # noqa: BLE001
            raise TypeError(f"implementation {describe_impl(impl)} cannot be sent to the sandbox ({exc}); "
                            "pass a module-level function or a 'package.module:function' string") from None
    table, index = [], {}
    payload = pickle.dumps({
        "impl": impl, "device": device, "flags": flags or {}, "memory_limit_mb": memory_limit_mb,
        "cases": [encode_case(c, table, index) for c in cases], "tensors": table, "reference": reference,
        "cuda_memory_fraction": float(os.environ.get("KC_CUDA_MEMORY_FRACTION", "0") or 0) or None,
    }, protocol=pickle.HIGHEST_PROTOCOL)
    ctx = _context()
    parent_conn, child_conn = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, args=(child_conn, payload), daemon=True)
    t0 = time.monotonic()
    _start(proc)
    child_conn.close()
    # until the child says it is alive, allow for starting the forkserver (one torch import, slow on a loaded
    # machine); from then on the contract's time limit applies to loading and running the candidate
    deadline = t0 + max(STARTUP_LIMIT_S, float(time_limit_s))
    started = False
    outcome = None
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = (f"no result within the time limit of {time_limit_s:g} s" if started else
                       f"the sandbox process did not start within {STARTUP_LIMIT_S:g} s")
                outcome = SandboxOutcome(kind="timeout", error={"type": "Timeout", "message": msg})
                break
            if parent_conn.poll(min(remaining, 0.5)):
                try:
                    msg = _loads_untrusted(parent_conn.recv_bytes())
                except EOFError:
                    proc.join(2)
                    outcome = SandboxOutcome(kind="crash", error=_crash_error(proc))
                    break
                except pickle.UnpicklingError as exc:
                    outcome = SandboxOutcome(kind="crash", error={"type": "ProtocolViolation", "message": str(exc)})
                    break
                if not isinstance(msg, dict):
                    outcome = SandboxOutcome(kind="crash", error={"type": "ProtocolViolation",
                                                                  "message": "malformed message from the sandbox"})
                    break
                if msg.get("kind") == "alive" and not started:
                    started = True
                    deadline = time.monotonic() + float(time_limit_s)
                    continue
                if msg.get("kind") == "progress":
                    if progress:
                        progress(msg["done"], msg["total"])
                    continue
                outcome = SandboxOutcome(msg)
                break
            if not proc.is_alive() and not parent_conn.poll(0):
                proc.join(1)
                outcome = SandboxOutcome(kind="crash", error=_crash_error(proc))
                break
    finally:
        _kill_group(proc)
        proc.join(5)
        parent_conn.close()
    outcome["wall_s"] = time.monotonic() - t0
    return outcome


def _start(proc):
    """Start the child even from a daemonic worker process (Celery's prefork pool marks its workers daemonic
    and multiprocessing refuses children there). Our child is always joined or killed by us, so lifting the
    flag for the duration of start() does not leak processes."""
    cur = mp.current_process()
    was = cur._config.get("daemon")  # noqa: SLF001
    if was:
        cur._config["daemon"] = False  # noqa: SLF001
    try:
        with _child_environment():
            proc.start()
    finally:
        if was:
            cur._config["daemon"] = was  # noqa: SLF001


# What a candidate's process may find in its environment: what Python, torch and the GPU stack read. Everything else
# the worker has — database, broker and cache URLs, secret and signing keys, cloud credentials — is left out.
CHILD_ENV_NAMES = {"PATH", "HOME", "USER", "LANG", "LANGUAGE", "TZ", "TMPDIR", "VIRTUAL_ENV", "LD_LIBRARY_PATH"}
CHILD_ENV_PREFIXES = ("PYTHON", "LC_", "CUDA_", "NVIDIA_", "CUBLAS_", "CUDNN_", "NCCL_", "OMP_", "MKL_", "OPENBLAS_",
                      "KMP_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "TRITON_", "HIP_", "ROCM_", "KC_")


def _child_may_see(name: str) -> bool:
    return name in CHILD_ENV_NAMES or name.startswith(CHILD_ENV_PREFIXES)


@contextlib.contextmanager
def _child_environment():
    """While a sandbox process starts — spawned, or the forkserver every later child is forked from — the process
    environment holds the allowlist only, so the candidate's ``os.environ`` and ``/proc/self/environ`` never had the
    worker's credentials. (Other processes of the same user stay readable through /proc: run conformance workers
    isolated, docs/security.md.)"""
    hidden = {k: v for k, v in os.environ.items() if not _child_may_see(k)}
    for name in hidden:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(hidden)


def _kill_group(proc):
    """Kill the child's process group (set up by os.setsid in the child), then the child itself."""
    import signal

    # only while the child is unreaped (alive, or a zombie only we can reap) is its pid surely still ours
    if proc.pid is None or not proc.is_alive():
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    proc.kill()


def _crash_error(proc) -> dict:
    code = proc.exitcode
    if code is not None and code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return {"type": "ProcessDied", "message": f"implementation process killed by signal {name}"}
    return {"type": "ProcessDied", "message": f"implementation process exited with code {code} before reporting"}
