"""Top-K lists of an ``fcr/1`` record (docs/fcr.md#rollout-and-trainer): per position ``[[id:int≥0, lp:number], …]``,
aligned 1:1 with ``response.token_ids``; the trainer's list must cover the rollout's ids. Checks (as in
:mod:`workers.fcr.tokens`: None or ``(field suffix, reason)``) and the conversions to ``[n, K]`` numpy arrays that
the audit (workers.fidelity) and the certificate engine (workers.certify) read records through, checking the
structure in the same C-level passes. Sortedness is the audit's business, not the format's.
"""

from __future__ import annotations

from array import array
from itertools import chain

import numpy as np

from workers.fcr.schema import T_INT, T_LIST, T_NUM, first_bad, is_int, is_num
from workers.fcr.tokens import check_ids


def check_topk(tk, n, fast=False, padding=False):
    """[[id:int≥0, lp:number], …] per position, aligned to n. Sortedness is the audit's business.
    ``padding=True`` also accepts the id −1 (a padded slot; the certificate engine's convention) and no other
    negative id."""
    if type(tk) is not list:
        return "", f"expected a per-position list, got {type(tk).__name__}"
    if len(tk) != n:
        return "", f"length {len(tk)} != len(response.token_ids) {n}"
    if not tk:
        return None
    if not set(map(type, tk)) <= T_LIST:
        i = first_bad(tk, lambda x: type(x) is list)
        return f"[{i}]", f"expected a list of [id, logprob] pairs, got {type(tk[i]).__name__}"
    if n <= 8 and _tiny_ok(tk):  # tiny calls: a plain loop beats the fixed cost of the C passes below
        return None
    if _pairs_ok(tk, fast):
        return None
    return _first_bad_entry(tk, padding)


def _tiny_ok(tk) -> bool:
    """Whether every entry of a short list is a ``[id:int≥0, lp:number]`` pair, by a plain loop."""
    for pos in tk:
        for e in pos:
            if not (type(e) is list and len(e) == 2 and type(e[0]) is int and e[0] >= 0 and type(e[1]) in T_NUM):
                return False
    return True


def _pairs_ok(tk, fast: bool) -> bool:
    """The fast form (typical engine output: ids are ints, log-probs floats): a handful of C-level passes; True
    only when every entry is a well-formed pair (False: the exact path decides)."""
    entries = list(chain.from_iterable(tk))
    if not entries:
        return True
    try:
        flat = list(chain.from_iterable(entries))
    except TypeError:
        return False
    if len(flat) != 2 * len(entries) or list(map(len, entries)).count(2) != len(entries):
        return False
    if fast:
        return check_ids(flat[0::2], True) is None and set(map(type, flat[1::2])) <= T_NUM
    ids = flat[0::2]
    return set(map(type, ids)) <= T_INT and set(map(type, flat[1::2])) <= T_NUM and min(ids) >= 0


def _first_bad_entry(tk, padding: bool):
    """The exact path: integral log-probs (e.g. JSON ``0`` written by a JS client) are fine; names the first bad
    entry, or None."""
    for t, pos in enumerate(tk):
        for j, e in enumerate(pos):
            where = f"[{t}][{j}]"
            if type(e) is not list or len(e) != 2:
                return where, "top-K entry must be a [token_id, logprob] pair"
            if not is_int(e[0]) or (e[0] < 0 and not (padding and e[0] == -1)):
                return where, (
                    f"top-K token id must be a non-negative int{' (or -1 for padding)' if padding else ''}"
                    f", got {e[0]!r}"
                )
            if not is_num(e[1]):
                return where, f"top-K log-prob must be a number, got {type(e[1]).__name__}"
    return None


def topk_arrays(tk, n):
    """Ragged ``[[id, lp], …]`` per position → (ids int64 [n, K] padded −1, lps float64 [n, K] padded NaN, lens)."""
    lens = np.fromiter(map(len, tk), dtype=np.int64, count=n) if n else np.zeros(0, dtype=np.int64)
    K = int(lens.max()) if n else 0
    m = int(lens.sum())
    if m == 0:
        return np.full((n, K), -1, dtype=np.int64), np.full((n, K), np.nan), lens
    flat = list(chain.from_iterable(chain.from_iterable(tk)))
    if (lens == K).all():  # common case: one float64 conversion, then a reshape
        a = np.asarray(flat, dtype=np.float64).reshape(n, K, 2)
        if a[:, :, 0].max() < 2.0**53:  # ids exact in float64
            return a[:, :, 0].astype(np.int64), np.ascontiguousarray(a[:, :, 1]), lens
    ids = np.full((n, K), -1, dtype=np.int64)
    lps = np.full((n, K), np.nan)
    rows = np.repeat(np.arange(n), lens)
    cols = np.arange(m) - np.repeat(np.cumsum(lens) - lens, lens)
    ids[rows, cols] = np.asarray(flat[0::2], dtype=np.int64)
    lps[rows, cols] = np.asarray(flat[1::2], dtype=np.float64)
    return ids, lps, lens


def topk_checked(tk, n):
    """A well-formed top-K list (per position ``[[id:int≥0, lp:number], …]``, aligned to n;
    docs/fcr.md#rollout-and-trainer) as
    :func:`topk_arrays` returns it, checking the structure in the same C-level passes that convert it; ``None`` when
    anything is unusual (then the validator names the problem and :func:`topk_arrays` converts).

    The caller guarantees that no JSON boolean is an array element of the source line
    (:func:`workers.fcr.tokens.array_bools_possible`): ``array('q')``/``array('d')`` would take booleans as 0/1."""
    if type(tk) is not list or len(tk) != n:
        return None
    if n == 0:
        return np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0)), np.zeros(0, dtype=np.int64)
    try:
        entries = list(chain.from_iterable(tk))
        # every entry has length 2; a position or entry that is not a list (a JSON object or string) flattens to
        # strings, which the typed arrays below refuse, and a number or null does not flatten at all — so this and
        # the conversions are the validator's list/pair/int/number checks
        if list(map(len, entries)).count(2) != len(entries):
            return None
        flat = list(chain.from_iterable(entries))
        ids = np.frombuffer(array("q", flat[0::2]), dtype=np.int64)
        lps = np.frombuffer(array("d", flat[1::2]), dtype=np.float64)
    except (TypeError, OverflowError, ValueError):
        return None
    if len(ids) and ids.min() < 0:
        return None
    lens = np.fromiter(map(len, tk), dtype=np.int64, count=n)
    K = int(lens.max())
    if len(ids) == n * K:  # uniform K: a reshape
        return ids.reshape(n, K), lps.reshape(n, K), lens
    out_ids = np.full((n, K), -1, dtype=np.int64)
    out_lps = np.full((n, K), np.nan)
    rows = np.repeat(np.arange(n), lens)
    cols = np.arange(len(ids)) - np.repeat(np.cumsum(lens) - lens, lens)
    out_ids[rows, cols] = ids
    out_lps[rows, cols] = lps
    return out_ids, out_lps, lens


def topk_uncovered(rollout_topk, trainer_topk):
    """Positions where ``trainer.top_k`` misses an id of ``rollout.top_k`` (fcr/1 requires the trainer list to cover
    the rollout's ids; a certificate there is looser). Lists already type-checked. Returns ``(count, first)``, first
    = −1 when none."""
    count, first = 0, -1
    for t, (ro, tr) in enumerate(zip(rollout_topk, trainer_topk)):
        if ro and not {e[0] for e in ro if e[0] >= 0} <= {e[0] for e in tr}:
            count += 1
            if first < 0:
                first = t
    return count, first
