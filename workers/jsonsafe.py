"""JSON-safe numbers: the one rule for results stored or printed as JSON (no Django, no torch; stdlib only).

PostgreSQL's JSON and strict JSON parsers have no NaN or ±∞, so a non-finite measurement is written as ``null``;
the record that carries it says why (a data error, an unbounded δ̂, a failed run). Two formats spell them
differently on purpose and keep their own helper: RFC 8785 canonical JSON of signed statements
(:func:`workers.verify.jcs.jsonable` writes ``"NaN"``/``"Infinity"`` so the signature covers the value itself)
and kernel verdict signatures and traces (:mod:`workers.contracts.runner` keeps an infinite measured error as
``"inf"``: an unbounded error is itself the finding, where null would read as "not measured").
"""

from __future__ import annotations

import math


def finite_or_none(x):
    """``float(x)`` when it is a finite number (numpy scalars included), else None (None, NaN, ±∞, a boolean, text)."""
    if x is None or isinstance(x, (bool, str, bytes)):
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def json_safe(value):
    """A copy of ``value`` with every non-finite float inside dicts, lists and tuples replaced by None; every
    other value (keys included) is left as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
