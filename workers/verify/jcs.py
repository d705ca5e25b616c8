"""Canonical JSON: RFC 8785 (JSON Canonicalization Scheme) through the ``rfc8785`` package.

JCS sorts object members by their UTF-16 code units, writes numbers the way ECMAScript's
``Number.prototype.toString`` does (RFC 8785 §3.2.2.3) and strings with the minimal escaping of §3.2.2.2, so the
same value always serialises to the same bytes — which is what a signature and a Merkle leaf need. NaN and
infinities have no JSON form: :func:`jsonable` turns them into the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` before canonicalisation so a certificate never silently drops one.
"""
from __future__ import annotations

import json
import math

import rfc8785


def jsonable(value):
    """A copy of ``value`` that JCS accepts: tuples become lists, non-finite floats become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
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
