"""The certificate's intake for ``fcr-parquet/1`` files (workers/fcr/columnar.py): rows straight from columns.

:func:`rows` yields what ``certify_file``'s loop consumes for a JSONL line, one row group in memory at a time:
``(row number, record, arrays)``; ``arrays`` is None (judge ``record`` as JSONL does), the
arrays, or a string: why the row's columns do not form a record. For a clean policy row, ``record`` holds only ``role``/``call_id``/
``trajectory_id``/``step`` and ``arrays`` is ``(y, a, b, p_top, q_top)`` sliced from the row group's columns with
no Python object per token. A row the vectorised checks flag (misaligned lengths, null or sentinel log-probs, a
negative id, top-K lists whose two columns differ in shape) comes back as its full fcr/1 record with ``arrays=None``,
so the JSONL code path (workers/certify/records.py ``extract``) judges it and gives the same reason, word for word.
"""

from __future__ import annotations

import numpy as np

from workers.fcr.columnar import SCALARS, TOPK, table_records
from workers.fcr.parquet_columns import ListColumn, row_any, topk_columns
from workers.fcr.reader import FcrParseError
from workers.fcr.schema import SENTINEL_CUT

ID_EXACT = 1 << 53  # the JSONL path reads top-K ids through float64
COLUMNS = [
    "role",
    "call_id",
    "trajectory_id",
    "step",
    "response_token_ids",
    "rollout_logprobs",
    "trainer_logprobs",
    *TOPK["rollout"],
    *TOPK["trainer"],
]


class _Position:
    """``tell()`` for certify_file's progress: compressed bytes of the row groups read so far."""

    closed = False

    def __init__(self):
        self.pos = 0

    def tell(self):
        return self.pos


def _logprob_column(table, name, T, rows):
    """(values float64, offsets, bad row flags) of a log-prob list column; a missing column → all rows null."""
    if name not in table.column_names:
        return None, None, np.ones(rows, bool)
    col = ListColumn(table.column(name), np.float64)
    v = col.values
    bad = col.row_null | (col.lengths() != T)
    flags = np.isnan(v) | (v <= SENTINEL_CUT)
    if col.value_null is not None:
        flags |= col.value_null
    return v, col.offsets, bad | row_any(flags, col.offsets)


def _topk_side(table, side, T, rows):
    ic, lc = TOPK[side]
    if ic not in table.column_names and lc not in table.column_names:
        return None, np.ones(rows, bool), np.zeros(rows, bool)
    if ic not in table.column_names or lc not in table.column_names:
        return None, np.zeros(rows, bool), np.ones(rows, bool)
    pos_off, ids, lps, row_null, bad_pos, bad_rows = topk_columns(table.column(ic), table.column(lc))
    flags = bad_pos | ((ids < 0) | (ids >= ID_EXACT)).any(1) | (lps <= SENTINEL_CUT).any(1) | np.isnan(lps).any(1)
    bad = bad_rows | (~row_null & ((np.diff(pos_off) != T) | row_any(flags, pos_off)))
    return (pos_off, ids, lps), row_null, bad


def rows(source, state):
    """``(row number, record, arrays | None)`` for every row of an ``fcr-parquet/1`` source (a
    :class:`workers.fcr.source.RunLogSource`; see the module docstring). An unreadable file or row group is recorded
    in ``state['stream_error']`` as ``(row, reason)`` and ends the rows (certify_file reports it as a DATA_ERROR, the
    way it reports a truncated gzip stream). A piece of row groups (workers.fcr.chunks.chunk_ranges) reads only
    those; row numbers stay those of the whole file."""
    position = _Position()
    state["raw"] = position
    try:
        log = source.run_log()
    except FcrParseError as exc:
        state["stream_error"] = (exc.line, str(exc))
        return
    groups = source.groups
    try:
        for g in range(log.num_row_groups) if groups is None else groups:
            try:
                table = log.read(g, COLUMNS)
            except FcrParseError as exc:
                state["stream_error"] = (exc.line, str(exc))
                return
            yield from _group_rows(log, g, table)
            position.pos += log.compressed[g]
    finally:
        log.close()


def _group_rows(log, g, table):
    R = table.num_rows
    first = log.starts[g] + 1
    scal = {
        k: (table.column(k).to_pylist() if k in table.column_names else [None] * R)
        for k in SCALARS
        if k in ("role", "call_id", "trajectory_id", "step")
    }
    y = ListColumn(table.column("response_token_ids"), np.int64)
    T = y.lengths()
    bad = y.row_null.copy()
    if y.value_null is not None:
        bad |= row_any(y.value_null, y.offsets)
    bad |= row_any(y.values < 0, y.offsets)
    a, a_off, bad_a = _logprob_column(table, "rollout_logprobs", T, R)
    b, b_off, bad_b = _logprob_column(table, "trainer_logprobs", T, R)
    bad |= bad_a | bad_b
    p, p_null, bad_p = _topk_side(table, "rollout", T, R)
    q, q_null, bad_q = _topk_side(table, "trainer", T, R)
    bad |= bad_p | bad_q
    full = None
    bad_l = bad.tolist()
    for r in range(R):
        rec = {
            "role": scal["role"][r],
            "call_id": scal["call_id"][r],
            "trajectory_id": scal["trajectory_id"][r],
            "step": scal["step"][r],
        }
        if rec["role"] is None:
            del rec["role"]
        elif rec["role"] != "policy":
            yield first + r, rec, None
            continue
        if bad_l[r]:
            if full is None:  # the whole group's records, once, only when some row needs the JSONL judgement
                full = dict(table_records(log.read(g), first))
            row = full[first + r]
            if isinstance(row, FcrParseError):  # columns that do not form a record: its reason, as a DATA_ERROR
                yield first + r, rec, f"{row.field + ': ' if row.field else ''}{row.reason}"
            else:
                yield first + r, row, None
            continue
        s, e = int(y.offsets[r]), int(y.offsets[r + 1])
        sa, sb = int(a_off[r]), int(b_off[r])
        n = e - s
        pt = qt = None
        if p is not None and not p_null[r]:
            ps = int(p[0][r])
            pt = (p[1][ps : ps + n], p[2][ps : ps + n])
        if q is not None and not q_null[r]:
            qs = int(q[0][r])
            qt = (q[1][qs : qs + n], q[2][qs : qs + n])
        yield first + r, rec, (y.values[s:e], a[sa : sa + n], b[sb : sb + n], pt, qt)


def max_policy_length(source) -> int:
    """The longest policy response of an ``fcr-parquet/1`` source (``_scan_T_ref`` for Parquet): two columns read
    per row group."""
    T = 0
    try:
        log = source.run_log()
    except FcrParseError:
        return 0
    try:
        for g in range(log.num_row_groups):
            t = log.read(g, ["role", "response_token_ids"])
            lens = ListColumn(t.column("response_token_ids"), np.int64).lengths()
            roles = t.column("role").to_pylist() if "role" in t.column_names else [None] * t.num_rows
            pol = np.array([r in (None, "policy") for r in roles], bool)
            if pol.any():
                T = max(T, int(lens[pol].max()))
    finally:
        log.close()
    return T
