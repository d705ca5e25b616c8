"""A contract file's text as data, every field with its line, checked against the schema
(docs/contract-language.md#the-parts-of-a-contract).

YAML is composed to a node tree first (``yaml.compose``) so every value keeps its source mark; the tree is converted
to plain Python while a ``path -> line`` map is recorded. Hostile documents end in :class:`ContractError`: duplicate
keys, recursive aliases, more than MAX_NODES nodes (alias expansion), unconstructible scalars. No torch.
"""

from __future__ import annotations

import datetime as _dt
import re

import yaml

from . import expr as _expr
from .schema import F


class ContractError(ValueError):
    """A contract-file problem: ``field`` is the dotted path (e.g. ``tolerance.bound``), ``line`` 1-based."""

    def __init__(self, message: str, *, field: str = "", line: int | None = None, source: str = ""):
        self.message, self.field, self.line, self.source = message, field, line, source
        loc = f"{source or '<contract>'}:{line}" if line else (source or "<contract>")
        super().__init__(f"{loc}: {field or '(document)'}: {message}")

    def to_dict(self):
        return {"field": self.field, "line": self.line, "message": self.message, "source": self.source}


MAX_NODES = 20000  # a contract has a few hundred; caps alias ("billion laughs") expansion


def _to_python(node, path: tuple, lines: dict, source: str, ctor, _open: frozenset = frozenset()):
    """Convert a composed yaml node to plain data, recording the line of every path. Rejects duplicate keys
    (PyYAML silently keeps the last one, which would hide an edit) and aliases that contain themselves."""
    lines[path] = node.start_mark.line + 1
    if len(lines) > MAX_NODES:
        raise ContractError(
            f"document has more than {MAX_NODES} nodes (alias expansion?)",
            field=dotted(path),
            line=node.start_mark.line + 1,
            source=source,
        )
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        if id(node) in _open:
            raise ContractError(
                "an alias refers to a node that contains it (recursive document)",
                field=dotted(path),
                line=node.start_mark.line + 1,
                source=source,
            )
        _open = _open | {id(node)}
    if isinstance(node, yaml.MappingNode):
        out = {}
        for knode, vnode in node.value:
            if not isinstance(knode, yaml.ScalarNode):
                raise ContractError(
                    "mapping keys must be scalars", field=dotted(path), line=knode.start_mark.line + 1, source=source
                )
            key = knode.value
            if key in out:
                raise ContractError(
                    f"duplicate key {key!r}", field=dotted(path + (key,)), line=knode.start_mark.line + 1, source=source
                )
            out[key] = _to_python(vnode, path + (key,), lines, source, ctor, _open)
            lines[path + (key,)] = knode.start_mark.line + 1  # a field is reported at its key's line
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, path + (i,), lines, source, ctor, _open) for i, v in enumerate(node.value)]
    # scalars: the safe constructor resolves ints / floats / bools / null / timestamps
    try:
        value = ctor.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError:
        raise
    except Exception as exc:  # noqa: BLE001 — PyYAML's scalar constructors on "!!int abc", "!!int ''", "!!timestamp 2020-13-45"
        raise ContractError(
            f"cannot construct value {node.value!r} as {node.tag}: {exc}",
            field=dotted(path),
            line=node.start_mark.line + 1,
            source=source,
        ) from None
    if isinstance(value, (_dt.date, _dt.datetime)):
        value = value.isoformat()
    return value


def parse_document(text: str, source: str) -> tuple[dict, dict]:
    """The document as plain data and the line of every field path; :class:`ContractError` for anything that is not
    one YAML document of bounded size built from the safe tags."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ContractError(
            f"YAML syntax error: {exc.problem or exc}", line=mark.line + 1 if mark else None, source=source
        ) from None
    except yaml.YAMLError as exc:
        raise ContractError(f"YAML error: {exc}", source=source) from None
    if node is None:
        raise ContractError("empty document", line=1, source=source)
    lines: dict = {}
    try:
        data = _to_python(node, (), lines, source, yaml.SafeLoader(""))
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        raise ContractError(
            f"cannot construct value: {exc.problem}", line=mark.line + 1 if mark else None, source=source
        ) from None
    return data, lines


def dotted(path) -> str:
    """A field's path as the messages write it: ``tolerance.bound``, ``sweeps.shapes[2]``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def line_for(lines: dict, path: tuple):
    """Line of ``path`` or of its closest existing ancestor (a missing field is reported at its parent)."""
    p = tuple(path)
    while p and p not in lines:
        p = p[:-1]
    return lines.get(p)


def check_schema(spec: F, value, path: tuple, lines: dict, source: str):
    """Check ``value`` against the schema entry ``spec`` (workers/contracts/schema.py); the first problem raises
    :class:`ContractError` naming the field and its line."""
    if spec.kind != "any":
        _KIND_CHECKS[spec.kind](spec, value, path, _Where(lines, source))


class _Where:
    """Where a checked value sits in its document: raises the problem with the field's dotted name and line."""

    def __init__(self, lines: dict, source: str):
        self.lines, self.source = lines, source

    def fail(self, msg: str, path: tuple):
        raise ContractError(msg, field=dotted(path), line=line_for(self.lines, path), source=self.source)

    def descend(self, spec: F, value, path: tuple):
        check_schema(spec, value, path, self.lines, self.source)


def _check_map(spec, value, path, where):
    if not isinstance(value, dict):
        where.fail(f"expected a mapping, found {type(value).__name__}", path)
    for name in value:
        if name not in spec.fields:
            where.fail(f"unknown field {name!r} (allowed: {', '.join(spec.fields)})", path + (name,))
    for name, sub in spec.fields.items():
        if name in value and value[name] is not None:
            where.descend(sub, value[name], path + (name,))
        elif sub.required:
            where.fail(f"required field {name!r} is missing", path + (name,))


def _check_dict(spec, value, path, where):
    if not isinstance(value, dict):
        where.fail(f"expected a mapping, found {type(value).__name__}", path)
    for name, v in value.items():
        where.descend(spec.items, v, path + (name,))


def _check_list(spec, value, path, where):
    if not isinstance(value, list):
        where.fail(f"expected a list, found {type(value).__name__}", path)
    if spec.nonempty and not value:
        where.fail("must not be empty", path)
    for i, v in enumerate(value):
        where.descend(spec.items, v, path + (i,))


def _check_str(spec, value, path, where):
    if not isinstance(value, str):
        where.fail(f"expected a string, found {type(value).__name__} {value!r}", path)
    if spec.enum and value not in spec.enum:
        where.fail(f"{value!r} is not one of {', '.join(map(str, spec.enum))}", path)
    if spec.pattern and not re.match(spec.pattern, value):
        where.fail(f"{value!r} does not match {spec.pattern}", path)


def _check_int(spec, value, path, where):
    if isinstance(value, bool) or not isinstance(value, int):
        where.fail(f"expected an integer, found {type(value).__name__} {value!r}", path)


def _check_bool(spec, value, path, where):
    if not isinstance(value, bool):
        where.fail(f"expected true/false, found {value!r}", path)


def _check_expr(spec, value, path, where):
    """An expression over the contract's names (``expr``), or one with no names that evaluates (``number``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        where.fail(f"expected a number or an expression, found {type(value).__name__}", path)
    try:
        e = _expr.parse(value)
    except _expr.ExprError as exc:
        where.fail(f"invalid expression: {exc}", path)
    if spec.kind != "number":
        return
    if e.names:
        where.fail(f"must be a constant; names {sorted(e.names)} are not bound here", path)
    try:
        e.evaluate({})
    except _expr.ExprError as exc:
        where.fail(str(exc), path)


_KIND_CHECKS = {
    "map": _check_map,
    "dict": _check_dict,
    "list": _check_list,
    "str": _check_str,
    "int": _check_int,
    "bool": _check_bool,
    "number": _check_expr,
    "expr": _check_expr,
}
