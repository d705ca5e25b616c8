"""One fcr/1 policy record → the arrays the certifier computes on, or the reason it cannot be certified.

:func:`extract` reads a parsed JSONL record; :func:`arrays_of` takes the arrays the Parquet intake
(workers/certify/parquet_rows.py) already sliced from its columns, or its reason, or falls back to :func:`extract`,
so both formats refuse a record with the same words. A :class:`RecordError` becomes a DATA_ERROR sequence naming
the line (or row), the call and the reason (docs/certify.md); nothing here raises anything else on bad data.
"""

from __future__ import annotations

from array import array

import numpy as np

from workers.fcr.schema import SENTINEL_CUT  # docs/fcr.md#conventions: values ≤ −9999 + 1e-6 are "not reported"
from workers.fcr.tokens import ids_array
from workers.fcr.validate import check_logprobs, check_topk, topk_arrays, topk_checked


class RecordError(Exception):
    """A policy record that cannot be certified (becomes a DATA_ERROR sequence)."""


def _logprobs(values, name, T, no_bools=False):
    """A log-prob list: JSON numbers only (a boolean or a numeric string is refused, never read as 0.0 / −0.5).
    ``no_bools``: the raw line has no JSON boolean as an array element, so one ``array('d')`` pass converts and
    checks together (it refuses null and strings; the slow path then names the entry)."""
    if not isinstance(values, list):
        raise RecordError(f"{name} missing or not a list")
    arr = None
    if no_bools and len(values) == T:
        try:
            arr = np.frombuffer(array("d", values), dtype=np.float64) if T else np.zeros(0)
        except (TypeError, OverflowError):
            arr = None
    if arr is None:
        bad = check_logprobs(values, T)
        if bad is not None:
            raise RecordError(
                f"misaligned arrays: response.token_ids has {T} entries, {name} has {len(values)}"
                if bad[0] == "" and len(values) != T
                else f"{name}{bad[0]}: {bad[1]}"
            )
        if None in values:
            raise RecordError(f"{name}[{values.index(None)}] is null (not reported)")
        arr = np.asarray(values, dtype=np.float64)
    if (arr <= SENTINEL_CUT).any():
        i = int(np.flatnonzero(arr <= SENTINEL_CUT)[0])
        raise RecordError(f"{name}[{i}] is a sentinel value ({arr[i]})")
    return arr


def _topk(top, name, T, no_bools=False):
    """``[[id, lp], …]`` per position → (ids [T, K] int64 with −1 padding, lps [T, K] float64). Ids are ints ≥ 0
    (−1 = a padded slot), log-probs JSON numbers; anything else is refused with the entry named. With ``no_bools``
    the format module's one-pass conversion (``topk_checked``) does the checks; −1 padding or anything unusual takes
    the checked slow path."""
    if not isinstance(top, list):
        raise RecordError(f"{name} is not a list")
    if len(top) != T:
        raise RecordError(f"misaligned arrays: response.token_ids has {T} entries, {name} has {len(top)}")
    fast = topk_checked(top, T) if no_bools else None
    if fast is not None:
        ids, lps, _ = fast
    else:
        bad = check_topk(top, T, padding=True)
        if bad is not None:
            raise RecordError(f"{name}{bad[0]}: {bad[1]}")
        ids, lps, _ = topk_arrays(top, T)
    listed = ids >= 0
    if (lps[listed] <= SENTINEL_CUT).any():
        raise RecordError(f"{name} has a sentinel log-prob")
    return ids, np.where(listed, lps, 0.0)


def uncovered_positions(p_top, q_top):
    """Positions where the trainer list misses an id of the rollout list (fcr/1 requires coverage)."""
    p_ids, q_ids = p_top[0], q_top[0]
    hit = (p_ids[:, :, None] == q_ids[:, None, :]).any(2) | (p_ids < 0)
    return int((~hit.all(1)).sum())


def extract(rec, no_bools=False):
    """A policy record's arrays ``(y, a, b, p_top, q_top)``; raises RecordError with the reason. ``no_bools``: see
    :func:`_logprobs`."""
    resp = rec.get("response")
    ids = resp.get("token_ids") if isinstance(resp, dict) else None
    if not isinstance(ids, list):
        raise RecordError("response.token_ids missing or not a list")
    T = len(ids)
    y, bad = ids_array(ids, no_bools)  # the format's id check (a JSON true is not token 1)
    if bad is not None:
        raise RecordError(f"response.token_ids{bad[0]}: {bad[1]}")
    roll = rec.get("rollout") if isinstance(rec.get("rollout"), dict) else {}
    trn = rec.get("trainer") if isinstance(rec.get("trainer"), dict) else {}
    if roll.get("logprobs") is None:
        raise RecordError("rollout.logprobs missing")
    if trn.get("logprobs") is None:
        raise RecordError("policy call without trainer.logprobs (nothing to compare the rollout with)")
    a = _logprobs(roll["logprobs"], "rollout.logprobs", T, no_bools)
    b = _logprobs(trn["logprobs"], "trainer.logprobs", T, no_bools)
    p_top = _topk(roll["top_k"], "rollout.top_k", T, no_bools) if roll.get("top_k") is not None else None
    q_top = _topk(trn["top_k"], "trainer.top_k", T, no_bools) if trn.get("top_k") is not None else None
    return y, a, b, p_top, q_top


def arrays_of(rec, pre, no_bools=False):
    """A policy record's arrays: ``pre`` when the columnar reader already has them (a string: why it cannot)."""
    if pre is None:
        return extract(rec, no_bools)
    if isinstance(pre, str):
        raise RecordError(pre)
    return pre


def record_meta(rec, line):
    """What a sequence row says of where it came from: call, trajectory, step (an integer or None) and line."""
    step = rec.get("step")
    return {
        "call_id": rec.get("call_id"),
        "trajectory_id": rec.get("trajectory_id"),
        "step": step if isinstance(step, int) and not isinstance(step, bool) else None,
        "line": line,
    }
