"""What a conformance submission says, checked before anything is stored: the implementation's import path, the
function map, the contract selection (resolved against the loaded suite) and an uploaded kernel module, which is
only *parsed* (``ast.parse``) here, never imported. Every refusal is a :class:`KernelSubmissionError` naming the
field and the reason."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass

from django.conf import settings

from audit_portal.core.errors import PortalError, UploadTooLarge
from audit_portal.kernels.models import Contract
from audit_portal.kernels.selectors import contracts_named, latest_contracts

KERNEL_MODULE_MAX_BYTES = int(getattr(settings, "KERNEL_MODULE_MAX_BYTES", 1024 * 1024))

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
IMPORT_PATH_RE = re.compile(rf"^{_IDENT}(\.{_IDENT})*(:{_IDENT}(\.{_IDENT})*)?$")
FUNCTION_RE = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")


class KernelSubmissionError(PortalError):
    default_code = "invalid_kernel_submission"


def parse_import_path(text: str) -> tuple[str, str | None]:
    """'package.module:function' -> ('package.module', 'function'); 'package.module' -> (module, None).
    File paths are refused: code from outside the worker's installed packages must be uploaded."""
    text = (text or "").strip()
    if not IMPORT_PATH_RE.match(text):
        raise KernelSubmissionError(
            f"Implementation {text!r} is not an import path: write 'package.module:function' (or 'package.module' "
            "to use each contract's function name); to test a file, upload it as 'module'.",
            code="invalid_import_path",
        )
    module, _, function = text.partition(":")
    return module, function or None


def parse_function_map(raw) -> dict[str, str]:
    """``functions``: a JSON object (or dict) {contract id or class: function name}."""
    if raw in (None, "", {}):
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise KernelSubmissionError(f"'functions' is not valid JSON: {exc}", code="invalid_function_map") from None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise KernelSubmissionError(
            '\'functions\' must map contract ids or classes to function names, e.g. {"C-PRC-01": "my_matmul"}.',
            code="invalid_function_map",
        )
    bad = sorted(v for v in raw.values() if not FUNCTION_RE.match(v))
    if bad:
        raise KernelSubmissionError(
            f"Not a Python function name: {', '.join(map(repr, bad))}.", code="invalid_function_map"
        )
    return {k.strip(): v.strip() for k, v in raw.items()}


def parse_contract_selection(raw) -> list[str]:
    if raw in (None, "", []):
        return []
    if isinstance(raw, str):
        raw = raw.strip()
        if raw.startswith("["):
            try:
                raw = json.loads(raw)
            except ValueError as exc:
                raise KernelSubmissionError(f"'contracts' is not valid JSON: {exc}", code="invalid_contracts") from None
        else:
            raw = [part for part in re.split(r"[\s,]+", raw) if part]
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise KernelSubmissionError("'contracts' must be a list of contract ids or classes.", code="invalid_contracts")
    return [x.strip() for x in raw if x.strip()]


def resolve_contracts(selection: list[str]) -> list[Contract]:
    """Contract ids or classes (optionally '@version') to loaded rows; empty = the whole latest suite. A class
    names the suite's contract; a declared-property contract is run only when named by its full id."""
    latest = latest_contracts()
    if not latest:
        raise KernelSubmissionError("No contracts are loaded; run 'manage.py load_contracts'.", code="no_contracts")
    if not selection:
        return latest
    declared = latest_contracts(declared=True)
    chosen, unknown = [], []
    for item in selection:
        name, _, version = item.partition("@")
        matches = contracts_named(name, latest, declared)
        if version:
            matches = list(Contract.objects.filter(contract_id__in=[c.contract_id for c in matches], version=version))
        if len(matches) != 1:
            unknown.append(item)
            continue
        if matches[0] not in chosen:
            chosen.append(matches[0])
    if unknown:
        known = [c.contract_id for c in latest + declared]
        raise KernelSubmissionError(
            f"Unknown contract {', '.join(map(repr, unknown))}. Known: {', '.join(known)} (or their classes).",
            code="unknown_contract",
            extra={"unknown": unknown, "known": known},
        )
    return chosen


@dataclass
class CheckedModule:
    data: bytes
    sha256: str
    top_level_names: set[str]


def check_kernel_module(data: bytes, filename: str) -> CheckedModule:
    """A single-file kernel module must be a UTF-8 Python source file of at most KERNEL_MODULE_MAX_BYTES that
    parses; it is never imported here. Raises with the reason (and the line of a syntax error)."""
    name = filename or "module"
    if not name.endswith(".py"):
        raise KernelSubmissionError(
            f"{name}: a kernel module must be a single Python source file ending in .py.", code="not_a_python_file"
        )
    if len(data) > KERNEL_MODULE_MAX_BYTES:
        raise UploadTooLarge(
            f"{name}: {len(data)} bytes exceeds the kernel module limit of {KERNEL_MODULE_MAX_BYTES} bytes.",
            code="kernel_module_too_large",
        )
    if not data.strip():
        raise KernelSubmissionError(f"{name}: the file is empty.", code="empty_kernel_module")
    if b"\x00" in data:
        raise KernelSubmissionError(
            f"{name}: binary file (contains NUL bytes), not Python source.", code="not_python_source"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise KernelSubmissionError(
            f"{name}: not UTF-8 text (invalid byte at line {line}).", code="not_python_source", extra={"line": line}
        ) from None
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError as exc:
        raise KernelSubmissionError(
            f"{name}: Python syntax error at line {exc.lineno}: {exc.msg}.",
            code="python_syntax_error",
            extra={"line": exc.lineno, "column": exc.offset, "message": exc.msg},
        ) from None
    return CheckedModule(data=data, sha256=hashlib.sha256(data).hexdigest(), top_level_names=_top_level_names(tree))


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names
