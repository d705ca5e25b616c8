"""Writing ``fcr-parquet/1`` (docs/run-log-parquet.md): the :class:`Writer` that turns fcr/1 records (or ready
columns) into row groups, the route columns (the trainer's routes stored as their difference from the rollout's where
both exist), and the conversions between fcr/1 JSONL and Parquet. The layout and reading are in ``columnar.py``.
No Django import."""

from __future__ import annotations

import os
from contextlib import contextmanager
from itertools import chain

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from workers.fcr import route_delta
from workers.fcr.columnar import (
    EXPERT_ID_MAX,
    FORMAT,
    ID_MAX,
    LISTS,
    META,
    ROUTE_SHAPE,
    ROUTES,
    ROW_GROUP_ROWS,
    ROW_GROUP_TOKENS,
    SCALARS,
    TOPK,
    arrow_schema,
    iter_records,
)
from workers.fcr.reader import FcrParseError


# --------------------------------------------------------------------------------------------- writing
def _list_array(values: list, offsets: list[int], nulls: list[bool], value_type) -> pa.Array:
    mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, value_type), mask=mask)


class Writer:
    """Writes ``fcr-parquet/1``: :meth:`add` fcr/1 records (dicts that passed ``validate_record``) or :meth:`add_table`
    ready columns; a row group is written every ``row_group_tokens`` response tokens / ``row_group_rows`` rows."""

    def __init__(
        self,
        path,
        *,
        float_type: str = "float64",
        row_group_tokens: int = ROW_GROUP_TOKENS,
        row_group_rows: int = ROW_GROUP_ROWS,
        compression: str = "zstd",
    ):
        self.schema = arrow_schema(float_type)
        self.path = path
        self._w = pq.ParquetWriter(path, self.schema, compression=compression)
        self.row_group_tokens, self.row_group_rows = row_group_tokens, row_group_rows
        self.rows = 0
        self._reset()

    def _reset(self):
        self._recs: list[dict] = []
        self._tokens = 0

    def add(self, rec: dict, line: int | None = None) -> None:
        """Queue one fcr/1 record (its arrays are taken by reference until the row group is written)."""
        where = f"line {line}" if line is not None else f"record {self.rows + len(self._recs) + 1}"
        for k in ("prompt", "response"):
            ids = (rec.get(k) or {}).get("token_ids") or ()
            if ids and max(ids) > ID_MAX:
                raise FcrParseError(
                    line or 0,
                    f"{where}: {k}.token_ids has an id above 2^63-1; {FORMAT} stores int64 ids",
                    f"{k}.token_ids",
                )
        for col, path in ROUTES.items():
            v = (rec.get(path[0]) or {}).get(path[1]) if not col.endswith("probs") else None
            if v is not None and len(v) and np.asarray(v).max() > EXPERT_ID_MAX:
                raise FcrParseError(
                    line or 0,
                    f"{where}: {'.'.join(path)} has an expert id above {EXPERT_ID_MAX}; "
                    f"{FORMAT} stores int16 expert ids",
                    ".".join(path),
                )
        self._recs.append(rec)
        self._tokens += len(rec["response"]["token_ids"])
        if self._tokens >= self.row_group_tokens or len(self._recs) >= self.row_group_rows:
            self.flush()

    def _records_table(self) -> pa.Table:
        recs = self._recs
        cols: dict[str, pa.Array] = {}
        for k, (kind, _) in SCALARS.items():
            cols[k] = pa.array([r.get(k) for r in recs], self.schema.field(k).type)
        metas = []
        for r in recs:
            m = {k: v for k, v in r.items() if k not in SCALARS}
            for part in ("prompt", "response", "rollout", "trainer"):
                if isinstance(m.get(part), dict):
                    m[part] = {k: v for k, v in m[part].items() if (part, k) not in _ARRAY_PATHS}
            metas.append(orjson.dumps(m).decode())
        cols[META] = pa.array(metas, pa.string())
        for col, (path, _) in LISTS.items():
            vals = [(r.get(path[0]) or {}).get(path[1]) if isinstance(r.get(path[0]), dict) else None for r in recs]
            cols[col] = pa.array(vals, self.schema.field(col).type)
        for side, (ic, lc) in TOPK.items():
            tks = [(r.get(side) or {}).get("top_k") if isinstance(r.get(side), dict) else None for r in recs]
            pos_off, ent_off, ids, lps, row_null = [0], [0], [], [], []
            for tk in tks:
                row_null.append(tk is None)
                for pos in tk or ():
                    flat = list(chain.from_iterable(pos))
                    ids.extend(flat[0::2])
                    lps.extend(flat[1::2])
                    ent_off.append(len(ids))
                pos_off.append(len(ent_off) - 1)
            ft = self.schema.field(lc).type.value_type.value_type
            inner_i = pa.ListArray.from_arrays(pa.array(ent_off, pa.int32()), pa.array(ids, pa.int64()))
            inner_l = pa.ListArray.from_arrays(pa.array(ent_off, pa.int32()), pa.array(lps, ft))
            mask = pa.array(row_null, pa.bool_()) if any(row_null) else None
            cols[ic] = pa.ListArray.from_arrays(pa.array(pos_off, pa.int32()), inner_i, mask=mask)
            cols[lc] = pa.ListArray.from_arrays(pa.array(pos_off, pa.int32()), inner_l, mask=mask)
        cols.update(
            route_columns(
                [
                    {
                        col: (r.get(path[0]) or {}).get(path[1]) if isinstance(r.get(path[0]), dict) else None
                        for col, path in ROUTES.items()
                    }
                    for r in recs
                ]
            )
        )
        return pa.table(cols, schema=self.schema)

    def add_table(self, table: pa.Table) -> None:
        """Write ready columns (missing optional columns become nulls) as one row group; flushes queued records."""
        self.flush()
        cols = []
        for f in self.schema:
            if f.name in table.column_names:
                cols.append(table.column(f.name).cast(f.type))
            else:
                cols.append(pa.nulls(table.num_rows, f.type))
        self._w.write_table(pa.Table.from_arrays(cols, schema=self.schema))
        self.rows += table.num_rows

    def flush(self) -> None:
        if self._recs:
            self._w.write_table(self._records_table())
            self.rows += len(self._recs)
        self._reset()

    def close(self) -> None:
        self.flush()
        self._w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_ARRAY_PATHS = {path for path, _ in LISTS.values()} | {(side, "top_k") for side in TOPK} | set(ROUTES.values())


def route_columns(rows: list[dict]) -> dict[str, pa.Array]:
    """The route columns for ``rows`` (one dict per record: column → ``[T, L, K]`` array-like or None)."""
    out: dict[str, pa.Array] = {}
    shape: dict[str, list] = {c: [] for c in ROUTE_SHAPE}
    rows = [_delta_row(row) for row in rows]
    for col in (*ROUTES, route_delta.COLUMN):
        dt, at = (np.float32, pa.float32()) if col.endswith("probs") else (np.int16, pa.int16())
        offsets, parts, nulls = [0], [], []
        for row in rows:
            v = row.get(col)
            if v is not None and not np.size(v):
                v = None  # a zero-token response's routes: stored as absent
            nulls.append(v is None)
            if v is not None:
                a = np.asarray(v)
                if col in ROUTES and dt is np.int16 and a.size and a.min() < -1:  # every negative id means "not
                    a = np.where(a < 0, -1, a)  # recorded": as −1, never wrapped by int16 into an expert id
                a = a.astype(dt)
                parts.append(a.reshape(-1))
                offsets.append(offsets[-1] + a.size)
            else:
                offsets.append(offsets[-1])
        values = pa.array(np.concatenate(parts) if parts else np.zeros(0, dt), at)
        mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
        out[col] = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, mask=mask)
    for row in rows:
        a = next(
            (np.shape(row[c]) for c in ("rollout_routed_experts", "trainer_routed_experts") if row.get(c) is not None),
            None,
        )
        shape["routes_layers"].append(None if a is None else a[1])
        shape["routes_top_k"].append(None if a is None else a[2])
    for c in ROUTE_SHAPE:
        out[c] = pa.array(shape[c], pa.int16())
    return out


def _delta_row(row: dict) -> dict:
    """The trainer's routes as their difference from the rollout's when both are there with one shape (the column
    then holds null); else as given."""
    delta = route_delta.encode(row.get("rollout_routed_experts"), row.get("trainer_routed_experts"))
    if delta is None:
        return row
    return {**row, "trainer_routed_experts": None, route_delta.COLUMN: delta}


# --------------------------------------------------------------------------------------------- conversion
@contextmanager
def _removed_on_error(dst):
    """Nothing is left at ``dst`` when a conversion stops."""
    try:
        yield
    except BaseException:
        try:
            os.unlink(dst)
        except OSError:
            pass
        raise


def jsonl_to_parquet(src, dst, *, float_type: str = "float64", row_group_tokens: int = ROW_GROUP_TOKENS) -> dict:
    """Convert an fcr/1 JSONL file (plain or gzip) to ``fcr-parquet/1``. Every record must pass ``validate_record``;
    the first one that does not stops the conversion with its line number and reason (nothing is left at ``dst``)."""
    from workers.fcr.reader import iter_records as iter_jsonl
    from workers.fcr.validate import validate_record

    n = 0
    with _removed_on_error(dst), Writer(dst, float_type=float_type, row_group_tokens=row_group_tokens) as w:
        for line_no, rec in iter_jsonl(src):
            errs = [i for i in validate_record(rec, line=line_no, lint=False) if i.severity == "error"]
            if errs:
                e = errs[0]
                raise FcrParseError(line_no, f"{e.reason} (call {e.call_id})", e.field or None)
            w.add(rec, line=line_no)
            n += 1
    return {"records": n, "row_groups": pq.ParquetFile(dst).metadata.num_row_groups, "bytes": os.path.getsize(dst)}


def parquet_to_jsonl(src, dst) -> dict:
    """Convert ``fcr-parquet/1`` back to fcr/1 JSONL (gzip when ``dst`` ends in ``.gz``), one line per row."""
    import gzip

    n = 0
    opener = gzip.open if str(dst).endswith(".gz") else open
    with _removed_on_error(dst), opener(dst, "wb") as out:
        for _, rec in iter_records(src):
            out.write(orjson.dumps(rec) + b"\n")
            n += 1
    return {"records": n, "bytes": os.path.getsize(dst)}
