"""Validation of an ``fcr-parquet/1`` file by columns (docs/run-log-parquet.md#how-each-engine-reads-it): the verdict
of :func:`workers.fcr.validate.validate_file` without turning every row back into an fcr/1 record.

Per row group, the per-token list columns are checked as whole numpy arrays (lengths aligned with
``response_token_ids``, no null where fcr/1 wants a value, ids non-negative, masks 0/1, top-K shapes equal, no NaN or
positive log-prob, no route column). A row that passes has its small part, ``meta_json`` and the promoted scalars,
checked as a *light* record: the same dict :func:`workers.fcr.columnar.table_records` builds, with each present
per-token list replaced by an empty list, run through the fast form of the record check
(:func:`workers.fcr.sections.record_ok`). Everything the light record cannot stand for sends the row to the record
path: a row any column check flags, ``meta_json`` that is not a JSON object, a per-token or route field inside
``meta_json`` (it would take the place of a null column), ``rollout.logprob_unverified`` or MoE fields (checked
against the token count), or a light record the fast check refuses. Those rows are rebuilt as records, in runs of
consecutive rows of about :data:`~workers.fcr.columnar.RECORD_SLICE_TOKENS` tokens, and go through the same
``Tally.check`` as before, so every error and warning is the record validator's, word for word, in row order
(tests/fcr/test_validate_columnar.py compares both paths on mutated files). One row group in memory at a time.
No Django import.
"""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa

from workers.fcr.columnar import LISTS, META, RECORD_SLICE_TOKENS, ROUTES, SCALARS, TOPK, table_records
from workers.fcr.parquet_columns import row_any
from workers.fcr.reader import FcrParseError
from workers.fcr.route_delta import COLUMN as DELTA
from workers.fcr.routes import has_routes
from workers.fcr.schema import POSITIVE_CUT, FcrIssue
from workers.fcr.sections import record_ok

# fcr/1 paths a null column leaves to meta_json: a light record cannot stand for a row whose meta_json has one
_PATHS = [path for path, _ in LISTS.values()] + [(side, "top_k") for side in TOPK] + list(ROUTES.values())
_FLOATS = (pa.float32(), pa.float64())


class _Unsupported(Exception):
    """A column type the vectorised checks do not cover (dictionary or half-float lists …): the whole row group
    takes the record path."""


def _list(arr):
    """``(offsets int64 [rows+1], values pa.Array, row_null bool [rows], value_null bool [values] | None)``."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise _Unsupported(str(arr.type))
    offsets = arr.offsets.to_numpy().astype(np.int64, copy=False)
    vals = arr.values
    value_null = vals.is_null().to_numpy(zero_copy_only=False) if vals.null_count else None
    return offsets, vals, arr.is_null().to_numpy(zero_copy_only=False), value_null


def _numbers(vals: pa.Array, kind: str) -> np.ndarray:
    t = vals.type
    if kind == "int" and not pa.types.is_integer(t) or kind == "float" and t not in _FLOATS:
        raise _Unsupported(str(t))
    if vals.null_count:
        vals = vals.fill_null(0)
    return vals.to_numpy(zero_copy_only=False)


def _per_row(flags, offsets) -> np.ndarray:
    """Per row (or position) of ``offsets``: whether any of its values is flagged (one pass when none is)."""
    if flags is None or not flags.any():
        return np.zeros(len(offsets) - 1, bool)
    return row_any(flags, offsets)


def rows_ok(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether its per-token columns pass every check the record validator makes of them (with no
    warning either), and n = the length of ``response_token_ids``."""
    rows, names = table.num_rows, set(table.column_names)
    for col in ("prompt_token_ids", "response_token_ids", "rollout_logprobs"):
        if col not in names:
            return np.zeros(rows, bool), np.zeros(rows, np.int64)
    off, vals, null, vnull = _list(table.column("response_token_ids"))
    n = np.diff(off)
    ok = ~null & ~_per_row(vnull, off) & ~_per_row(_numbers(vals, "int") < 0, off)
    off, vals, null, vnull = _list(table.column("prompt_token_ids"))
    ok &= ~null & ~_per_row(vnull, off) & ~_per_row(_numbers(vals, "int") < 0, off)
    for col, (_, kind) in LISTS.items():
        if col in ("prompt_token_ids", "response_token_ids") or col not in names:
            continue
        ok &= _per_token_ok(table.column(col), col, kind, n)
    for ids_col, lps_col in TOPK.values():
        if ids_col not in names and lps_col not in names:
            continue
        if ids_col not in names or lps_col not in names:  # one of the pair in the file: any row with it is flagged
            ok &= table.column(ids_col if ids_col in names else lps_col).is_null().to_numpy(zero_copy_only=False)
            continue
        ok &= ~_topk_bad(table.column(ids_col), table.column(lps_col), n)
    for col in (*ROUTES, DELTA):
        if col in names:
            ok &= table.column(col).is_null().to_numpy(zero_copy_only=False)
    return ok, n


def _per_token_ok(column, col: str, kind: str, n: np.ndarray) -> np.ndarray:
    """Per row: whether a per-token list column (other than the token ids) passes: aligned with ``n`` and its
    values as fcr/1 wants them; null is fine except for ``rollout_logprobs``."""
    off, vals, null, vnull = _list(column)
    bad = np.diff(off) != n
    if kind == "float":  # nulls are fine; NaN and positive values are left to the record path (warnings)
        v = _numbers(vals, "float").astype(np.float64, copy=False)
        flag = np.isnan(v) | (v > POSITIVE_CUT)
        if vnull is not None:
            flag &= ~vnull
        bad |= _per_row(flag, off)
    elif kind == "string":
        if not (pa.types.is_string(vals.type) or pa.types.is_large_string(vals.type)):
            raise _Unsupported(str(vals.type))
        bad |= _per_row(vnull, off)
    elif col == "trainer_loss_mask":
        v = _numbers(vals, "int")
        bad |= _per_row(vnull, off) | _per_row((v != 0) & (v != 1), off)
    else:  # token policy versions: int or null, any value
        _numbers(vals, "int")
    if col == "rollout_logprobs":
        return ~null & ~bad
    return null | ~bad


def _topk_bad(ids_column, lps_column, n: np.ndarray) -> np.ndarray:
    """Per row: whether a side's pair of top-K columns is flagged (shapes differ, a null or negative id, a null
    log-prob, or a length other than ``n``)."""
    oi, pos_i, null_i, pnull_i = _list(ids_column)
    ol, pos_l, null_l, pnull_l = _list(lps_column)
    ii, vi, _, vnull_i = _list(pos_i)
    il, vl, _, vnull_l = _list(pos_l)
    li, ll = np.diff(ii), np.diff(il)
    if not np.array_equal(oi, ol) or len(li) != len(ll):  # positions do not line up: rows of another shape
        raise _Unsupported("top-K columns of different shapes")
    pos_bad = li != ll
    for flags in (pnull_i, pnull_l):
        if flags is not None:
            pos_bad |= flags
    pos_bad |= _per_row(vnull_i, ii) | _per_row(vnull_l, il) | _per_row(_numbers(vi, "int") < 0, ii)
    _numbers(vl, "float")
    both = ~null_i & ~null_l
    return (null_i != null_l) | (both & ((np.diff(oi) != n) | _per_row(pos_bad, oi)))


def _light(meta: str, r: int, scalars: dict, present: dict):
    """Row ``r``'s record with every present per-token list as ``[]``, or None when the row needs its record."""
    try:
        rec = orjson.loads(meta)
    except (orjson.JSONDecodeError, TypeError):
        return None
    if type(rec) is not dict:
        return None
    for path in _PATHS:
        parent = rec.get(path[0])
        if type(parent) is dict and path[1] in parent:
            return None
    ro = rec.get("rollout")
    if type(ro) is dict and ro.get("logprob_unverified") is not None:
        return None
    for k, col in scalars.items():
        v = col[r]
        if v is not None:
            rec[k] = v
    for path, col in present.items():
        if col[r]:
            parent = rec.get(path[0])
            if not isinstance(parent, dict):
                parent = rec[path[0]] = {}
            parent[path[1]] = []
    if has_routes(rec) or not record_ok(rec, True):
        return None
    return rec


def read_columns_into(tally, reader) -> tuple[int, int]:
    """What :func:`workers.fcr.validate.read_into` does with a :class:`~workers.fcr.columnar.RowReader`, by columns:
    the same counts, issues and summary. Returns the last row number and the compressed bytes of the groups read."""
    line_no = 0
    try:
        log = reader.run_log()
    except FcrParseError as exc:
        tally.records += 1
        tally.add(FcrIssue(exc.line, None, exc.field or "", exc.reason))
        return exc.line, 0
    done = 0
    try:
        for g in range(log.num_row_groups) if reader.groups is None else reader.groups:
            try:
                table = log.read(g)
            except FcrParseError as exc:
                tally.records += 1
                tally.add(FcrIssue(exc.line, None, exc.field or "", exc.reason))
                return exc.line, done
            if table.num_rows:
                line_no = _group_into(tally, table, log.starts[g] + 1)
                reader.line_no = line_no
            del table
            done += log.compressed[g]
            reader.position = done
            if reader.on_bytes is not None:
                reader.on_bytes(done)
    finally:
        log.close()
    return line_no, done


def _group_into(tally, table: pa.Table, first_row: int) -> int:
    rows = table.num_rows
    try:
        ok, n = rows_ok(table)
    except _Unsupported:
        ok, n = np.zeros(rows, bool), None
    names = set(table.column_names)
    metas = table.column(META).to_pylist()
    scalars = {k: table.column(k).to_pylist() for k in SCALARS if k in names}
    present = {}
    for col, (path, _) in LISTS.items():
        if col in names:
            present[path] = (~table.column(col).is_null().to_numpy(zero_copy_only=False)).tolist()
    for side, (ids_col, _) in TOPK.items():
        if ids_col in names:
            present[(side, "top_k")] = (~table.column(ids_col).is_null().to_numpy(zero_copy_only=False)).tolist()
    if n is not None:
        n = n.tolist()
    ok = ok.tolist()
    pending: list[int] = []  # consecutive rows that need their records
    pending_tokens = 0
    resp = None
    for r in range(rows):
        rec = _light(metas[r], r, scalars, present) if ok[r] else None
        if rec is None:
            if resp is None:
                resp = _lengths(table)
            if pending and pending_tokens + resp[r] > RECORD_SLICE_TOKENS:
                _records_into(tally, table, pending, first_row)
                pending, pending_tokens = [], 0
            pending.append(r)
            pending_tokens += resp[r]
            continue
        if pending:
            _records_into(tally, table, pending, first_row)
            pending, pending_tokens = [], 0
        tally.records += 1
        if tally.declared(rec, first_row + r):
            tally._count(rec, first_row + r, n[r])
    if pending:
        _records_into(tally, table, pending, first_row)
    return first_row + rows - 1


def _lengths(table: pa.Table) -> list[int]:
    if "response_token_ids" not in table.column_names:
        return [0] * table.num_rows
    try:
        return np.diff(_list(table.column("response_token_ids"))[0]).tolist()
    except _Unsupported:
        return [0] * table.num_rows


def _records_into(tally, table: pa.Table, rows: list[int], first_row: int) -> None:
    """Consecutive ``rows`` of ``table`` rebuilt as records and checked as ``read_into`` checks a Parquet row."""
    for row_no, rec in table_records(table.slice(rows[0], len(rows)), first_row + rows[0]):
        tally.records += 1
        if isinstance(rec, FcrParseError):
            tally.add(FcrIssue(row_no, None, rec.field or "", rec.reason))
            continue
        tally.check(rec, row_no, True, check_hashes=False, lint=False)
