"""Extra form fields an upload may carry, declared by the apps above ``runs`` (which runs must not import): each
registers ``check(raw) -> value or None`` (raises a PortalError for a bad value, before anything is stored) and
``store(upload, value, fields)`` (after the upload is received; ``fields``: every registered field checked, so one
store may read another field; None: checked only). audit_portal/live registers ``steps``, the step range of a
segment of a growing run, and ``rank``, the process that wrote it."""

from __future__ import annotations

from collections.abc import Callable

_FIELDS: dict[str, tuple[Callable, Callable]] = {}


def register(name: str, check: Callable, store: Callable | None) -> None:
    _FIELDS[name] = (check, store)


def checked(data) -> dict:
    """The registered fields present in the request, checked (raises on a bad one)."""
    out = {}
    for name, (check, _) in _FIELDS.items():
        value = check(data.get(name))
        if value is not None:
            out[name] = value
    return out


def store(upload, values: dict) -> None:
    for name, value in values.items():
        if _FIELDS[name][1] is not None:
            _FIELDS[name][1](upload, value, values)
