"""The environment a verdict was measured in (docs/contracts.md, "Trace record"): measured by the parent, never
reported by the candidate.

The static part — interpreter, torch build, platform, CPU model, device properties — is read here, in the worker
that runs the harness (the sandbox runs the same interpreter and torch from a read-only bind). The numeric flags as
applied for the run are measured inside the sandbox's child *before* the implementation is loaded; what the flags
were after the candidate ran is recorded separately as ``flags_after`` (the candidate could have changed them)."""

from __future__ import annotations

import functools
import platform


@functools.lru_cache(maxsize=4)
def static_fingerprint(device: str = "cpu") -> dict:
    import torch

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    fp = {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "platform": platform.platform(),
        "device": device,
        "cpu": cpu,
        "mkl": bool(torch.backends.mkl.is_available()),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device).index or 0)
        fp["cuda"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "total_memory": int(props.total_memory),
            "cuda_runtime": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        }
        try:
            fp["cuda"]["driver"] = int(torch._C._cuda_getDriverVersion())  # best effort
        except Exception:  # noqa: BLE001 - best effort: a platform without the call has no driver version
            fp["cuda"]["driver"] = None
    return fp


def fingerprint(device: str, outcome: dict, requested: dict) -> dict:
    """The verdict's ``environment``: static part, flags measured before the candidate loaded, the isolation."""
    env = dict(static_fingerprint(device))
    measured = outcome.get("environment") or {}
    flags = dict(measured.get("flags") or {})
    env["num_threads"] = flags.pop("num_threads", None)
    flags["allow_hf32"] = (requested or {}).get("allow_hf32")
    env["flags"] = flags
    env["memory_cap_bytes"] = measured.get("memory_cap_bytes")
    if outcome.get("flags_after") is not None:
        env["flags_after"] = outcome["flags_after"]  # as reported after the candidate ran: its word, not ours
    env["isolation"] = outcome.get("isolation") or {}
    env["resources"] = outcome.get("resources") or {}
    env["requested_flags"] = dict(requested or {})
    return env
