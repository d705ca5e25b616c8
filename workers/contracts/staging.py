"""Which code a sandbox runs (docs/contracts.md, "Isolation"): an implementation reference (``pkg.mod:fn`` or
``/path/file.py:fn``) becomes a :class:`StagedImpl` — a module of the bound Python environment, imported by name,
or one file whose bytes are read once, hashed and staged read-only into the sandbox. :func:`load_impl` imports in
this process and is only for trusted code (the suite's own reference fixtures)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re

from . import isolation

_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def describe_impl(impl) -> str:
    if isinstance(impl, str):
        return impl
    mod, name = getattr(impl, "__module__", None), getattr(impl, "__qualname__", None)
    return f"{mod}:{name}" if mod and name else repr(impl)


def split_ref(ref: str):
    """'pkg.mod:fn' or '/path/file.py:fn' -> (target, attribute)."""
    if ":" not in ref:
        raise ValueError(
            f"implementation reference {ref!r} must look like 'package.module:function' or '/path/to/file.py:function'"
        )
    target, _, attr = ref.rpartition(":")
    if not target or not attr:
        raise ValueError(f"implementation reference {ref!r} is incomplete")
    return target, attr


def load_impl(ref):
    """Import an implementation *in this process* — only for trusted code (the suite's own reference fixtures in
    calibration's naive check); submitted code is only ever loaded inside the sandbox."""
    if callable(ref):
        return ref
    target, attr = split_ref(ref)
    if target.endswith(".py") or os.sep in target:
        spec = importlib.util.spec_from_file_location(
            "trusted_" + hashlib.sha256(target.encode()).hexdigest()[:8], os.path.abspath(target)
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class StagedImpl:
    """Where the sandbox finds an implementation: a module of the bound Python environment, imported by name, or a
    single file copied (bytes read once, hashed, staged) into the session's read-only library directory."""

    def __init__(self, ref):
        ref = describe_impl(ref)
        target, self.attr = split_ref(ref)
        self.ref, self.data, self.module = ref, None, None
        if target.endswith(".py") or os.sep in target:
            path = os.path.abspath(target)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"implementation file {path} does not exist")
            stem = os.path.splitext(os.path.basename(path))[0]
            self.module = stem if _MODULE_NAME.match(stem) and len(stem) <= 40 else "kernel"
            with open(path, "rb") as fh:
                self.data = fh.read()
            return
        spec = importlib.util.find_spec(target)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            raise ModuleNotFoundError(f"no Python module {target!r} in this environment")
        self.module = target
        if not _inside_python_environment(spec.origin):  # e.g. a module of a checkout: staged as its single file
            self.module = target.rsplit(".", 1)[-1]
            with open(spec.origin, "rb") as fh:
                self.data = fh.read()
        else:
            with open(spec.origin, "rb") as fh:
                self.source_hash = hashlib.sha256(fh.read()).hexdigest()

    @property
    def sha256(self) -> str | None:
        return hashlib.sha256(self.data).hexdigest() if self.data is not None else getattr(self, "source_hash", None)

    @property
    def source_key(self) -> tuple:
        """What identifies the code (never changes): the bytes of a staged file, or a module of the environment."""
        return ("file", self.sha256) if self.data is not None else ("module", self.module)


def _inside_python_environment(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(source.rstrip("/") + "/") for source, _ in isolation._python_roots()) or real.startswith(
        "/usr/"
    )
