"""The per-token lists of an ``fcr/1`` record (docs/fcr.md#rollout-and-trainer): token ids, log-probs, integer
lists and masks aligned 1:1 with ``response.token_ids``. Each check returns None when the list is fine, else
``(field suffix, reason)`` of the *first* problem, e.g. ``("[3]", "log-prob must be a number or null, got str")``.

Speed: the portal validates uploads within 2× a plain ``orjson`` parse, so a check is a few C-level passes
(``set(map(type, xs))``, ``min``, ``len``, ``array(…)``) and a Python loop runs only on a failure, to name the first
offending index. ``fast=True`` is the caller's promise that no JSON boolean is an array element of the source line
(:func:`array_bools_possible`): then one ``array('Q')`` / ``bytes()`` pass checks type and range together (without
the promise they would take ``true`` for 1).
"""

from __future__ import annotations

from array import array

import numpy as np

from workers.fcr.schema import (
    INT_OR_NULL,
    LOGPROB_UNVERIFIED_REASONS,
    POSITIVE_CUT,
    SENTINEL_CUT,
    T_INT,
    T_NUM_NULL,
    FcrIssue,
    first_bad,
    is_int,
    is_num,
    member,
)

BITS = frozenset({0, 1})


def check_ids(a, fast=False):
    """Non-negative int list. ``fast``: the caller guarantees no JSON booleans in arrays (see
    :func:`array_bools_possible`), so one ``array('Q', …)`` pass checks int-ness and sign together."""
    if type(a) is not list:
        return "", f"expected a list of token ids, got {type(a).__name__}"
    if not a:
        return None
    if fast:
        try:
            array("Q", a)
            return None
        except (TypeError, OverflowError):
            pass
    if not set(map(type, a)) <= T_INT:
        i = first_bad(a, is_int)
        return f"[{i}]", f"token id must be an int, got {type(a[i]).__name__}"
    if min(a) < 0:
        i = first_bad(a, lambda x: x >= 0)
        return f"[{i}]", f"token id must be non-negative, got {a[i]}"
    if fast and max(a) >= 1 << 64:
        i = first_bad(a, lambda x: x < 1 << 64)
        return f"[{i}]", f"token id out of range, got {a[i]}"
    return None


def ids_array(a, fast=False):
    """A token-id list as an int64 numpy array, checked as :func:`check_ids` checks it (non-negative ints, never a
    JSON boolean): ``(array, None)``, or ``(None, (suffix, reason))`` of the first problem. With ``fast`` one
    ``array('q')`` pass converts and checks type together (the engines' intake of well-formed lines)."""
    if fast and type(a) is list:
        try:
            arr = np.frombuffer(array("q", a), dtype=np.int64) if a else np.zeros(0, np.int64)
        except (TypeError, OverflowError):
            arr = None
        if arr is not None and (not len(arr) or arr.min() >= 0):
            return arr, None
    bad = check_ids(a)
    if bad is not None:
        return None, bad
    try:
        return (np.asarray(a, dtype=np.int64) if a else np.zeros(0, np.int64)), None
    except OverflowError:  # an id past int64: certify and the audit index arrays with these
        i = first_bad(a, lambda x: x < 1 << 63)
        return None, (f"[{i}]", f"token id out of range, got {a[i]}")


def check_logprobs(a, n):
    """(number|null)[] aligned to n."""
    if type(a) is not list:
        return "", f"expected a list of log-probs, got {type(a).__name__}"
    if len(a) != n:
        return "", f"length {len(a)} != len(response.token_ids) {n}"
    if a and not set(map(type, a)) <= T_NUM_NULL:
        i = first_bad(a, lambda x: x is None or is_num(x))
        return f"[{i}]", f"log-prob must be a number or null, got {type(a[i]).__name__}"
    return None


def check_ints_aligned(a, n, what):
    if type(a) is not list:
        return "", f"expected a list of {what}, got {type(a).__name__}"
    if len(a) != n:
        return "", f"length {len(a)} != len(response.token_ids) {n}"
    if a and not set(map(type, a)) <= T_INT:
        i = first_bad(a, is_int)
        return f"[{i}]", f"{what} must be an int, got {type(a[i]).__name__}"
    return None


def check_versions_aligned(a, n):
    """``rollout.token_policy_versions``: (int|null)[] aligned to n — null where the version that sampled the token
    is unknown (docs/fcr.md#rollout-and-trainer)."""
    if type(a) is not list:
        return "", f"expected a list of policy versions, got {type(a).__name__}"
    if len(a) != n:
        return "", f"length {len(a)} != len(response.token_ids) {n}"
    if a and not set(map(type, a)) <= INT_OR_NULL:
        i = first_bad(a, lambda x: x is None or is_int(x))
        return f"[{i}]", f"policy version must be an int or null, got {type(a[i]).__name__}"
    return None


def check_unverified_spans(a, n):
    """``rollout.logprob_unverified``: ``[[start, end, reason], …]`` — 0 ≤ start < end ≤ n, reason one of
    :data:`~workers.fcr.schema.LOGPROB_UNVERIFIED_REASONS`."""
    if type(a) is not list:
        return "", f"expected a list of [start, end, reason] spans, got {type(a).__name__}"
    for i, s in enumerate(a):
        if not (type(s) is list and len(s) == 3 and is_int(s[0]) and is_int(s[1]) and 0 <= s[0] < s[1] <= n):
            return f"[{i}]", f"expected [start, end, reason] with 0 <= start < end <= {n}"
        if s[2] is None or not member(s[2], LOGPROB_UNVERIFIED_REASONS):
            return f"[{i}][2]", (
                f"unknown reason {s[2]!r}; expected one of {', '.join(sorted(LOGPROB_UNVERIFIED_REASONS))}"
            )
    return None


def check_mask(a, n, fast=False):
    if type(a) is list and len(a) == n and fast:
        try:  # bytes() accepts only ints 0..255; translate() then deletes the 0/1 bytes
            if not bytes(a).translate(None, b"\x00\x01"):
                return None
        except (TypeError, ValueError):
            pass
    r = check_ints_aligned(a, n, "mask value")
    if r is not None:
        return r
    if a and not set(a) <= BITS:
        i = first_bad(a, lambda x: x == 0 or x == 1)
        return f"[{i}]", f"mask value must be 0 or 1, got {a[i]}"
    return None


def logprob_warnings(a):
    """Audit-level findings on a log-prob list (already type-checked): sentinels and positive values."""
    if not a:
        return None
    try:
        lo, hi = min(a), max(a)
    except TypeError:  # nulls present
        vals = [x for x in a if x is not None]
        if not vals:
            return None
        lo, hi = min(vals), max(vals)
    out = []
    if lo <= SENTINEL_CUT:
        i = first_bad(a, lambda x: x is None or x > SENTINEL_CUT)
        out.append((f"[{i}]", "sentinel log-prob (≤ -9999); the audit excludes such positions (R6)"))
    if hi > POSITIVE_CUT:
        i = first_bad(a, lambda x: x is None or x <= POSITIVE_CUT)
        out.append((f"[{i}]", "positive log-prob; the audit excludes such positions (R6/R8)"))
    return out


def positive_logprob_issues(rec, line: int) -> list[FcrIssue]:
    """Warnings for positive log-probs in a well-formed record's ``rollout.logprobs`` / ``trainer.logprobs``: not a
    format error (the audit and the certificate exclude such positions), but said at upload rather than only in the
    certificate. Two C-level ``max`` passes per list."""
    out = []
    for name, block in (("rollout", rec.get("rollout")), ("trainer", rec.get("trainer"))):
        lps = block.get("logprobs") if type(block) is dict else None
        if not lps:
            continue
        try:
            hi = max(lps)
        except TypeError:  # nulls present
            hi = max((x for x in lps if x is not None), default=None)
        if hi is not None and hi > POSITIVE_CUT:
            i = first_bad(lps, lambda x: x is None or x <= POSITIVE_CUT)
            out.append(
                FcrIssue(
                    line,
                    rec.get("call_id"),
                    f"{name}.logprobs[{i}]",
                    f"positive log-prob {lps[i]!r}; the audit and the certificate exclude such positions",
                    "warning",
                )
            )
    return out


def array_bools_possible(line: bytes) -> bool:
    """True unless the raw JSON line provably has no boolean *array element*: every ``true``/``false``
    literal is preceded (whitespace aside) by ``:`` (an object value) or sits inside text that is not
    preceded by ``[``/``,``. False positives (e.g. a string containing ``",true"``) only cost speed."""
    for lit in (b"true", b"false"):
        i = line.find(lit)
        while i != -1:
            j = i - 1
            while j >= 0 and line[j] in b" \t\r\n":
                j -= 1
            if j < 0 or line[j] in b"[,":
                return True
            i = line.find(lit, i + 1)
    return False
