"""``fcr-parquet/1`` list columns as numpy arrays, for engines that work on whole columns (the certifier's Parquet
path): a list column's flat values with its offsets, per-row reductions over them, and the top-K columns as padded
2-D arrays. No Django import."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


class ListColumn:
    """A list column of one row group as numpy: ``offsets`` (rows + 1), ``values``, ``row_null`` (bool per row),
    ``value_null`` (bool per value, or None when there is none)."""

    __slots__ = ("offsets", "values", "row_null", "value_null")

    def __init__(self, arr: pa.Array, dtype):
        if isinstance(arr, pa.ChunkedArray):  # one chunk per row group read: take it as is (combining copies)
            arr = arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
        self.offsets = arr.offsets.to_numpy().astype(np.int64)
        vals = arr.values
        self.value_null = vals.is_null().to_numpy(zero_copy_only=False) if vals.null_count else None
        if pa.types.is_list(vals.type):
            self.values = vals
        else:  # no copy when there is no null to fill
            self.values = (
                (vals.fill_null(0) if vals.null_count else vals)
                .to_numpy(zero_copy_only=False)
                .astype(dtype, copy=False)
            )
        self.row_null = arr.is_null().to_numpy(zero_copy_only=False)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def row_any(flags: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per row (segments given by ``offsets``): whether any flag in the row is set."""
    c = np.concatenate([[0], np.cumsum(flags, dtype=np.int64)])
    return (c[offsets[1:]] - c[offsets[:-1]]) > 0


def topk_columns(ids: pa.Array, lps: pa.Array):
    """A row group's top-K pair of columns → ``(pos_offsets [rows+1], ids [P, K] int64 padded −1, lps [P, K] float64
    padded 0, row_null, bad_position)`` where ``bad_position`` flags positions whose two lists differ in length or hold
    a null log-prob, K = the longest list in the group."""
    oi, ol = ListColumn(ids, np.int64), ListColumn(lps, np.float64)
    inner_i, inner_l = ListColumn(oi.values, np.int64), ListColumn(ol.values, np.float64)
    n_i, n_l = inner_i.lengths(), inner_l.lengths()
    P = len(n_i)
    bad = (n_i != n_l) if len(n_l) == P else np.ones(P, bool)
    for null_positions in (oi.value_null, ol.value_null):
        if null_positions is not None and len(null_positions) == P:
            bad |= null_positions
    if inner_l.value_null is not None:
        bad |= row_any(inner_l.value_null, inner_l.offsets)
    if inner_i.value_null is not None:
        bad |= row_any(inner_i.value_null, inner_i.offsets)
    K = int(n_i.max()) if P else 0
    if P and not bad.any() and (n_i == K).all() and inner_i.offsets[0] == 0 and inner_l.offsets[0] == 0:
        id_mat = inner_i.values[: P * K].reshape(P, K)
        lp_mat = inner_l.values[: P * K].reshape(P, K)
    else:
        id_mat = np.full((P, K), -1, np.int64)
        lp_mat = np.zeros((P, K))
        ok = ~bad
        lens = np.where(ok, n_i, 0)
        rows = np.repeat(np.arange(P), lens)
        starts_i = np.repeat(inner_i.offsets[:-1], lens)
        col = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        id_mat[rows, col] = inner_i.values[starts_i + col]
        lp_mat[rows, col] = inner_l.values[np.repeat(inner_l.offsets[:-1], lens) + col]
    row_null = oi.row_null | ol.row_null
    bad_rows = (oi.row_null != ol.row_null) | (oi.lengths() != ol.lengths())
    return oi.offsets, id_mat, lp_mat, row_null, bad, bad_rows
