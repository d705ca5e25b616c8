"""Canonical JSON: RFC 8785 (JSON Canonicalization Scheme) through the ``rfc8785`` package.

JCS sorts object members by their UTF-16 code units, writes numbers the way ECMAScript's
``Number.prototype.toString`` does (RFC 8785 §3.2.2.3) and strings with the minimal escaping of §3.2.2.2, so the
same value always serialises to the same bytes — which is what a signature and a Merkle leaf need. NaN and
infinities have no JSON form: :func:`jsonable` turns them into the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` before canonicalisation so a certificate never silently drops one. Numbers of any size sign:
``rfc8785`` refuses integers beyond ±(2^53 − 1), so :func:`jsonable` maps them first (see :func:`_large_int`).
"""

from __future__ import annotations

import json
import math

import rfc8785


SAFE_INT = 2**53 - 1


def _large_int(value: int):
    """An integer outside ±(2^53 − 1), which ``rfc8785`` refuses (an ECMAScript number cannot hold it exactly).
    When the integer is exactly what RFC 8785 writes for a double (always so for a JSON-parsed number that a double
    was serialised to, e.g. ``235385266837019980`` for exp(40)), it is that double: the bytes are unchanged, so a
    statement signed from floats and re-read from JSON canonicalises to the same bytes. Any other integer (one no
    double serialises to, e.g. 2^53 + 1) becomes its decimal string, so no digit is lost; the same rule runs in the
    signer and the verifier, so the signature holds either way."""
    as_float = float(value)
    if math.isfinite(as_float) and rfc8785.dumps(as_float) == str(value).encode():
        return as_float
    return str(value)


def jsonable(value):
    """A copy of ``value`` that JCS accepts: tuples become lists, non-finite floats become strings, integers beyond
    ±(2^53 − 1) become the double they stand for or their decimal string (:func:`_large_int`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, int) and not isinstance(value, bool) and not -SAFE_INT <= value <= SAFE_INT:
        return _large_int(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def canonical(value) -> bytes:
    """RFC 8785 canonical UTF-8 bytes of ``value`` (after :func:`jsonable`)."""
    return rfc8785.dumps(jsonable(value))


def loads(data: bytes | str):
    return json.loads(data)
