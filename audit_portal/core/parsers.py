"""The JSON request-body parser of every API view: bounded in size and in nesting depth before it parses.

DRF's own ``JSONParser`` reads the whole stream (a non-form body is not held to ``DATA_UPLOAD_MAX_MEMORY_SIZE``) and
hands it to :mod:`json`, whose recursive decoder raises ``RecursionError`` on a body such as ``[[[[…]]]]`` a few
thousand levels deep: a 500 on every JSON endpoint. This parser

* reads at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (10 MiB) and answers a larger body with 413 ``request_too_large``;
* measures the nesting depth first, on the bytes, without parsing (:func:`json_depth`: linear, brackets inside
  strings ignored); a body nested deeper than ``MAX_JSON_DEPTH`` (32; the deepest legitimate body, a kernel submission's
  ``required`` map, is 2 deep) is refused with 400 ``json_too_deep`` naming the limit, before the decoder runs;
* answers malformed JSON, NaN/Infinity and invalid UTF-8 with 400 ``malformed_request``, as DRF does.
"""

from __future__ import annotations

import json

import numpy as np
from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser

from audit_portal.core.errors import PortalError

MAX_JSON_DEPTH = 32

_KEEP = b'[]{}"'  # what the depth depends on, once escaped quotes are gone
_DROP = bytes(c for c in range(256) if c not in _KEEP)
_DEPTH_STEP = np.zeros(256, dtype=np.int8)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1


class JsonTooDeep(PortalError):
    default_code = "json_too_deep"


class RequestTooLarge(PortalError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays/objects in ``raw``, brackets inside strings ignored. Linear time in C and numpy
    whatever the input (no recursion, no regular expression): escaped backslashes and then escaped quotes are removed
    (so every quote left opens or closes a string), everything but brackets and quotes is dropped, brackets between an
    odd and the next even quote are inside a string and count nothing, and the depth is the largest running sum of +1
    per ``[``/``{`` and -1 per ``]``/``}``. Malformed input can make the number wrong only for a body the decoder
    refuses anyway."""
    kept = np.frombuffer(raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _DROP), dtype=np.uint8)
    if not kept.size:
        return 0
    steps = _DEPTH_STEP.take(kept)
    steps[np.logical_xor.accumulate(kept == ord('"'))] = 0  # inside a string (an opening quote counts nothing too)
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if limit is not None and len(raw) > limit:
            raise RequestTooLarge(f"The JSON body is larger than the limit of {limit} bytes.")
        depth = json_depth(raw)
        if depth > MAX_JSON_DEPTH:
            raise JsonTooDeep(
                f"The JSON body is nested {depth} levels deep; the limit is {MAX_JSON_DEPTH}.",
                extra={"limit": MAX_JSON_DEPTH, "depth": depth},
            )
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json.loads(raw.decode(encoding), parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: cannot pass the depth check
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
