"""``fcr-parquet/1``: the ``fcr/1`` run log as Apache Parquet (docs/run-log-parquet.md).

The same content as an ``fcr/1`` JSONL file, one row per record: the per-token arrays are typed list columns
(top-K lists as two nested list columns, ids and log-probs), the few scalars every engine needs are columns, and the
rest of each record (model, tokenizer, engine, sampling, hashes, …) is one JSON text per row (``meta_json``; the
per-token arrays are taken out of it). Row groups are the unit of streaming: a reader holds one row group at a time
and refuses a row group whose declared uncompressed size is above ``ReadLimits.max_row_group_bytes``.

The format version is in the file's key-value metadata (``fcr.format = fcr-parquet/1``); a reader refuses another
version, an unknown column or a column of the wrong type, naming it. No Django import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from workers.fcr import route_delta
from workers.fcr.reader import FcrParseError, ReadLimits
from workers.fcr.record_check import validate_record

FORMAT = "fcr-parquet/1"
FORMAT_KEY = b"fcr.format"
RECORD_SCHEMA_KEY = b"fcr.record_schema"
MAGIC = b"PAR1"
# The row-group limits are ReadLimits.max_row_group_bytes / max_decoded_bytes (workers/fcr/reader.py, with every
# other read limit). The decoded one matters because the footer's sizes are of the encoded pages, and a
# dictionary-encoded column can decode to far more (one long string repeated in every row: a 1.8 MB file decoding
# to 820 MB in tests/fcr/test_parquet_bounds.py)
PREFLIGHT_DECODED_BYTES = 96 << 20  # the web pre-flight samples first rows only from row groups up to this size
CHECK_BATCH_ROWS = 256  # rows per step of the decoded-size check (string columns read as dictionaries)
_FIXED_WIDTH = {"INT64": 8, "DOUBLE": 8, "INT32": 4, "FLOAT": 4, "BOOLEAN": 1}
ROW_GROUP_TOKENS = 1 << 16  # the writer closes a row group at about this many response tokens
ROW_GROUP_ROWS = 4096  # … or this many records
ID_MAX = (1 << 63) - 1

# Promoted scalars: column → (type kind, required)
SCALARS = {
    "run_id": ("string", True),
    "trajectory_id": ("string", True),
    "call_id": ("string", True),
    "step": ("int", True),
    "call_index": ("int", True),
    "role": ("string", False),
}
# Per-token list columns: column → (path in the record, value kind)
LISTS = {
    "prompt_token_ids": (("prompt", "token_ids"), "int"),
    "response_token_ids": (("response", "token_ids"), "int"),
    "response_token_strings": (("response", "token_strings"), "string"),
    "rollout_logprobs": (("rollout", "logprobs"), "float"),
    "rollout_token_policy_versions": (("rollout", "token_policy_versions"), "int"),
    "trainer_logprobs": (("trainer", "logprobs"), "float"),
    "trainer_loss_mask": (("trainer", "loss_mask_used"), "int"),
}
# Top-K lists: side → (ids column, log-probs column); each list<list<…>>: position → entries
TOPK = {
    "rollout": ("rollout_topk_ids", "rollout_topk_logprobs"),
    "trainer": ("trainer_topk_ids", "trainer_topk_logprobs"),
}
# MoE routes (docs/routing.md): each list is the record's [tokens, layers, top_k] array flattened row-major; the
# two int columns give layers and top_k (the token count follows from the length)
ROUTES = {
    "rollout_routed_experts": ("rollout", "routed_experts"),
    "trainer_routed_experts": ("trainer", "routed_experts"),
    "rollout_router_topk_probs": ("rollout", "router_topk_probs"),
}
ROUTE_SHAPE = ("routes_layers", "routes_top_k")
EXPERT_ID_MAX = (1 << 15) - 1
META = "meta_json"
REQUIRED = [k for k, (_, req) in SCALARS.items() if req] + [
    META,
    "prompt_token_ids",
    "response_token_ids",
    "rollout_logprobs",
]
_LIST_TYPES = {"int": pa.int64(), "string": pa.string()}


def arrow_schema(float_type: str = "float64") -> pa.Schema:
    """The writer's schema; ``float_type`` (``float64`` lossless for JSON, ``float32`` what trainers hold) is the type
    of every log-prob value."""
    ft = {"float64": pa.float64(), "float32": pa.float32()}[float_type]
    fields = [
        pa.field(k, pa.string() if kind == "string" else pa.int64(), nullable=not req)
        for k, (kind, req) in SCALARS.items()
    ]
    fields.append(pa.field(META, pa.string(), nullable=False))
    for col, (_, kind) in LISTS.items():
        vt = pa.int8() if col == "trainer_loss_mask" else ft if kind == "float" else _LIST_TYPES[kind]
        fields.append(pa.field(col, pa.list_(vt)))
    for ids_col, lps_col in TOPK.values():
        fields.append(pa.field(ids_col, pa.list_(pa.list_(pa.int64()))))
        fields.append(pa.field(lps_col, pa.list_(pa.list_(ft))))
    for col in ROUTES:
        fields.append(pa.field(col, pa.list_(pa.float32() if col.endswith("probs") else pa.int16())))
    fields.append(pa.field(route_delta.COLUMN, pa.list_(pa.int16())))  # the trainer's routes as a difference
    fields += [pa.field(col, pa.int16()) for col in ROUTE_SHAPE]
    return pa.schema(fields, metadata={FORMAT_KEY: FORMAT.encode(), RECORD_SCHEMA_KEY: b"fcr/1"})


def is_parquet(path) -> bool:
    """True when the file starts with the Parquet magic (the name is not consulted)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


# --------------------------------------------------------------------------------------------- schema check
def _kind(t: pa.DataType) -> str | None:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _kind(t.value_type)
        return None if inner is None else f"list<{inner}>"
    return None


def expected_kinds() -> dict[str, str]:
    out = {k: kind for k, (kind, _) in SCALARS.items()}
    out[META] = "string"
    out.update({col: f"list<{kind}>" for col, (_, kind) in LISTS.items()})
    for ids_col, lps_col in TOPK.values():
        out[ids_col], out[lps_col] = "list<list<int>>", "list<list<float>>"
    out.update({col: "list<float>" if col.endswith("probs") else "list<int>" for col in ROUTES})
    out[route_delta.COLUMN] = "list<int>"
    out.update(dict.fromkeys(ROUTE_SHAPE, "int"))
    return out


def schema_problems(schema: pa.Schema) -> list[str]:
    """What makes ``schema`` unreadable as ``fcr-parquet/1`` (empty list: fine), each naming the column."""
    meta = schema.metadata or {}
    fmt = meta.get(FORMAT_KEY)
    if fmt is None:
        return [f"not an {FORMAT} file: the key-value metadata has no 'fcr.format' entry"]
    if fmt != FORMAT.encode():
        return [f"format {fmt.decode(errors='replace')!r} is not supported (this reader reads {FORMAT})"]
    want = expected_kinds()
    problems = []
    for name in schema.names:
        if name not in want:
            problems.append(f"column {name!r}: unknown in {FORMAT}")
    for name, kind in want.items():
        if name not in schema.names:
            if name in REQUIRED:
                problems.append(f"column {name!r}: missing (required)")
            continue
        got = _kind(schema.field(name).type)
        if got != kind:
            problems.append(f"column {name!r}: expected {kind}, got {schema.field(name).type}")
    return problems


class RunLog:
    """An open ``fcr-parquet/1`` file: footer read and checked, row groups read one at a time, each only after its
    decoded size is known to be within ``ReadLimits.max_decoded_bytes`` (workers/fcr/reader.py).

    Bounded decoding, in two steps. At open, from the footer: a row group whose encoded size is above
    ``max_row_group_bytes``, or whose fixed-width values (declared count × width, whatever their encoding) are above
    the decoded limit, is refused. At read: the variable-length (string) columns are first read as Arrow dictionary
    arrays, :data:`CHECK_BATCH_ROWS` rows at a time (indices and the dictionary only, which the encoded size
    bounds), and their decoded size is summed from the dictionary's value lengths taken at the indices; past the limit
    the row group is refused naming the column, before anything is decoded. Only then is the row group read."""

    def __init__(self, path, limits: ReadLimits | None = None):
        limits = ReadLimits.from_env() if limits is None else limits
        max_row_group_bytes = limits.max_row_group_bytes
        self.max_decoded = limits.max_decoded_bytes
        self.path = path
        try:
            self.pf = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as exc:
            raise FcrParseError(0, f"not a readable Parquet file ({exc})") from exc
        problems = schema_problems(self.pf.schema_arrow)
        if problems:
            raise FcrParseError(0, "; ".join(problems[:5]))
        md = self.pf.metadata
        self.num_row_groups = md.num_row_groups
        self.num_rows = md.num_rows
        self.columns = set(self.pf.schema_arrow.names)
        self.strings = [f.name for f in self.pf.schema_arrow if _has_strings(f.type)]
        self.starts = [0]
        self.fixed_bytes = []
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            if rg.total_byte_size > max_row_group_bytes:
                raise FcrParseError(
                    self.starts[-1] + 1,
                    f"row group {i} declares {rg.total_byte_size} bytes "
                    f"uncompressed, above the limit of {max_row_group_bytes} (write smaller row "
                    f"groups)",
                )
            fixed = sum(
                rg.column(j).num_values * _FIXED_WIDTH.get(rg.column(j).physical_type, 0) for j in range(md.num_columns)
            )
            if fixed > self.max_decoded:
                raise FcrParseError(
                    self.starts[-1] + 1,
                    f"row group {i} declares {fixed} bytes of numbers, above "
                    f"the decoded limit of {self.max_decoded} (FCR_PARQUET_MAX_DECODED_BYTES; write "
                    f"smaller row groups)",
                )
            self.fixed_bytes.append(fixed)
            self.starts.append(self.starts[-1] + rg.num_rows)
        self.compressed = [
            sum(md.row_group(i).column(j).total_compressed_size for j in range(md.num_columns))
            for i in range(md.num_row_groups)
        ]
        self._dict_pf = None

    def _check_strings(self, i: int, cols: list[str] | None, limit: int) -> int:
        """Refuse row group ``i`` when its string columns would decode, together with its declared numbers, to more
        than ``limit`` bytes; nothing is decoded to find out. Returns the strings' decoded bytes."""
        names = [c for c in self.strings if cols is None or c in cols]
        if not names:
            return 0
        if self._dict_pf is None:
            leaves = [c for c in self.pf.schema.names if c.split(".")[0] in self.strings]
            try:
                self._dict_pf = pq.ParquetFile(self.path, read_dictionary=leaves)
            except (pa.ArrowException, OSError) as exc:
                raise FcrParseError(self.starts[i] + 1, f"row group {i} cannot be read ({exc})") from exc
        sizes = dict.fromkeys(names, 0)
        seen = 0
        try:
            for batch in self._dict_pf.iter_batches(
                batch_size=CHECK_BATCH_ROWS, row_groups=[i], columns=names, use_threads=False
            ):
                for name, arr in zip(batch.schema.names, batch.columns):
                    sizes[name] += _decoded_bytes(arr)
                seen += batch.num_rows
                if self.fixed_bytes[i] + sum(sizes.values()) > limit:
                    worst = max(sizes, key=sizes.get)
                    raise FcrParseError(
                        self.starts[i] + 1,
                        f"row group {i} decodes to more than {limit} bytes "
                        f"(column {worst!r}: {sizes[worst]} bytes in its first {seen} rows; a "
                        f"dictionary-encoded column expands), above the decoded limit "
                        f"(FCR_PARQUET_MAX_DECODED_BYTES); refused before decoding it",
                        field=worst,
                    )
        except (pa.ArrowException, OSError) as exc:
            raise FcrParseError(self.starts[i] + 1, f"row group {i} cannot be read ({exc})") from exc
        return sum(sizes.values())

    def read(self, i: int, columns: Iterable[str] | None = None) -> pa.Table:
        cols = None if columns is None else [c for c in columns if c in self.columns]
        self._check_strings(i, cols, self.max_decoded)
        try:
            return self.pf.read_row_group(i, columns=cols)
        except (pa.ArrowException, OSError) as exc:
            raise FcrParseError(self.starts[i] + 1, f"row group {i} cannot be read ({exc})") from exc

    def head(self, rows: int, limit: int = PREFLIGHT_DECODED_BYTES) -> pa.Table | None:
        """Up to the first ``rows`` rows, for a sample: each row group on the way is first checked as :meth:`read`
        checks it (a bomb is refused here exactly as the validation job would refuse it), then sampled only when the
        whole group decodes to at most ``limit`` bytes (a conservative bound for part of it); the sample stops at
        the first group above that, leaving the rest to the job. None when no row was read."""
        parts = []
        for g in range(self.num_row_groups):
            if rows <= 0:
                break
            strings = self._check_strings(g, None, self.max_decoded)
            if self.fixed_bytes[g] + strings > limit:
                break
            try:
                batch = next(self.pf.iter_batches(batch_size=rows, row_groups=[g], use_threads=False), None)
            except (pa.ArrowException, OSError) as exc:
                raise FcrParseError(self.starts[g] + 1, f"row group {g} cannot be read ({exc})") from exc
            if batch is not None and batch.num_rows:
                parts.append(batch)
                rows -= batch.num_rows
        return pa.Table.from_batches(parts) if parts else None

    def close(self):
        self.pf.close()
        if self._dict_pf is not None:
            self._dict_pf.close()


def _has_strings(t: pa.DataType) -> bool:
    while pa.types.is_list(t) or pa.types.is_large_list(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)


def _decoded_bytes(arr: pa.Array) -> int:
    """What ``arr`` occupies once decoded: a dictionary array's values are counted at every index that uses them
    (its lengths taken at the indices and summed, in Arrow), lists through their values, plus offsets."""
    if isinstance(arr, pa.ChunkedArray):
        return sum(_decoded_bytes(c) for c in arr.chunks)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        return 8 * (len(arr) + 1) + _decoded_bytes(arr.flatten())
    if pa.types.is_dictionary(arr.type):
        lengths = pc.binary_length(arr.dictionary)
        used = pc.take(lengths, arr.indices)
        return int(pc.sum(used).as_py() or 0) + 8 * (len(arr) + 1)
    return arr.nbytes


# --------------------------------------------------------------------------------------------- records
def _set(rec: dict, path: tuple[str, str], value):
    parent = rec.get(path[0])
    if not isinstance(parent, dict):
        parent = rec[path[0]] = {}
    parent[path[1]] = value


def table_records(
    table: pa.Table, first_row: int, *, numpy_routes: bool = False
) -> Iterator[tuple[int, dict | FcrParseError]]:
    """``(row number (1-based), record)`` for every row of ``table``: the fcr/1 dict the row stands for (a row whose
    ``meta_json`` is not a JSON object gives an :class:`FcrParseError` in place of the record). ``numpy_routes``: the
    MoE route fields as numpy arrays ``[T, L, K]`` instead of nested lists (the routing audit; the format check
    accepts both)."""
    names = table.column_names
    cols = {
        n: table.column(n).to_pylist()
        for n in names
        if n not in sum(TOPK.values(), ()) and n not in ROUTES and n != route_delta.COLUMN
    }
    routes = {
        c: table.column(c).to_numpy(zero_copy_only=False) if c in names else None for c in (*ROUTES, route_delta.COLUMN)
    }  # numpy object arrays of per-row numpy arrays (None: null)
    shape = {c: table.column(c).to_pylist() if c in names else [None] * table.num_rows for c in ROUTE_SHAPE}
    topk = {}
    for side, (ic, lc) in TOPK.items():
        if ic in names or lc in names:
            ids = table.column(ic).to_pylist() if ic in names else [None] * table.num_rows
            lps = table.column(lc).to_pylist() if lc in names else [None] * table.num_rows
            topk[side] = (ids, lps)
    for r in range(table.num_rows):
        row_no = first_row + r
        try:
            rec = orjson.loads(cols[META][r])
        except (orjson.JSONDecodeError, TypeError) as exc:
            yield row_no, FcrParseError(row_no, f"not valid JSON ({exc})", META)
            continue
        if not isinstance(rec, dict):
            yield row_no, FcrParseError(row_no, f"expected a JSON object, got {type(rec).__name__}", META)
            continue
        for k in SCALARS:
            v = cols[k][r] if k in cols else None
            if v is not None:
                rec[k] = v
        for col, (path, _) in LISTS.items():
            v = cols[col][r] if col in cols else None
            if v is not None:
                _set(rec, path, v)
        for side, (ids, lps) in topk.items():
            i_row, l_row = ids[r], lps[r]
            if i_row is None and l_row is None:
                continue
            if (
                i_row is None
                or l_row is None
                or len(i_row) != len(l_row)
                or any((a is None) != (b is None) or (a is not None and len(a) != len(b)) for a, b in zip(i_row, l_row))
            ):
                yield (
                    row_no,
                    FcrParseError(row_no, "top-K ids and log-probs do not have the same shape", f"{side}.top_k"),
                )
                break
            _set(
                rec,
                (side, "top_k"),
                [None if a is None else [[x, y] for x, y in zip(a, b)] for a, b in zip(i_row, l_row)],
            )
        else:
            problem = _set_routes(rec, r, routes, shape, numpy_routes)
            yield row_no, (rec if problem is None else FcrParseError(row_no, problem[1], problem[0]))


def _set_routes(rec, r, routes, shape, as_numpy=False):
    """Put row ``r``'s route columns back as nested lists; ``(field, reason)`` when their shape does not add up."""
    L, K = shape["routes_layers"][r], shape["routes_top_k"][r]
    for col, path in ROUTES.items():
        flat = None if routes[col] is None else routes[col][r]
        if flat is None:
            continue
        if not L or not K or L < 1 or K < 1 or len(flat) % (L * K):
            return ".".join(path), (
                f"{len(flat)} values do not make [tokens, {L}, {K}] (columns routes_layers, routes_top_k)"
            )
        arr = np.asarray(flat).reshape(-1, L, K)
        _set(rec, path, arr if as_numpy else arr.tolist())
    delta = None if routes[route_delta.COLUMN] is None else routes[route_delta.COLUMN][r]
    if delta is not None:
        if routes["trainer_routed_experts"] is not None and routes["trainer_routed_experts"][r] is not None:
            return "trainer.routed_experts", f"given both whole and as {route_delta.COLUMN}"
        rollout = None if routes["rollout_routed_experts"] is None else routes["rollout_routed_experts"][r]
        trainer, problem = route_delta.decode(rollout, delta)
        if problem:
            return "trainer.routed_experts", problem
        arr = trainer.reshape(-1, L, K)
        _set(rec, ("trainer", "routed_experts"), arr if as_numpy else arr.tolist())
    return None


def iter_records(
    path, progress: Callable[[int, int], None] | None = None, *, numpy_routes: bool = False
) -> Iterator[tuple[int, dict]]:
    """``(row number, record)`` for every row, one row group in memory at a time; raises :class:`FcrParseError`
    (naming the row) on an unreadable file or row. ``progress(compressed bytes read, file size)`` after each group."""
    for row_no, rec in iter_records_or_errors(path, progress, numpy_routes=numpy_routes):
        if isinstance(rec, FcrParseError):
            raise rec
        yield row_no, rec


RECORD_SLICE_TOKENS = 8192  # rows become Python records about this many response tokens at a time


def record_slices(table: pa.Table) -> Iterator[tuple[int, int]]:
    """``(first row, rows)`` slices of ``table`` holding about :data:`RECORD_SLICE_TOKENS` response tokens each (at
    least one row): the records of a whole row group at once are large in Python objects (94 MiB for a 43 k-token
    top-K group in tests/fcr/test_parquet.py; 19 MiB sliced)."""
    if "response_token_ids" not in table.column_names or table.num_rows == 0:
        if table.num_rows:
            yield 0, table.num_rows
        return
    col = table.column("response_token_ids")
    arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    start = acc = 0
    for r, n in enumerate(np.diff(arr.offsets.to_numpy()).tolist()):
        if acc and acc + n > RECORD_SLICE_TOKENS:
            yield start, r - start
            start, acc = r, 0
        acc += n
    yield start, table.num_rows - start


def iter_records_or_errors(
    path,
    progress: Callable[[int, int], None] | None = None,
    *,
    numpy_routes: bool = False,
    groups: range | None = None,
    limits: ReadLimits | None = None,
):
    """:func:`iter_records` that yields an :class:`FcrParseError` in place of a bad row (and, for a file that cannot
    be opened, once, with row 0) instead of raising, so a validator can go on and count. ``groups``: only these row
    groups (a chunk of :func:`workers.fcr.chunks.chunk_ranges`); row numbers stay those of the whole file.
    ``limits``: None reads them from the environment."""
    try:
        log = RunLog(path, limits)
    except FcrParseError as exc:
        yield exc.line, exc
        return
    try:
        done = 0
        for i in range(log.num_row_groups) if groups is None else groups:
            try:
                table = log.read(i)
            except FcrParseError as exc:
                yield exc.line, exc
                return
            for off, n in record_slices(table):  # Python objects for a few thousand tokens at a time
                yield from table_records(table.slice(off, n), log.starts[i] + 1 + off, numpy_routes=numpy_routes)
            done += log.compressed[i]
            if progress is not None:
                progress(done, sum(log.compressed))
    finally:
        log.close()


class RowReader:
    """The rows of an ``fcr-parquet/1`` file with the interface of :class:`workers.fcr.reader.LineReader` that
    ``validate_file`` uses: iterate ``(row number, record | FcrParseError)``; ``position`` (compressed bytes of the
    row groups read), ``line_no``, ``compressed`` (False: Parquet pages are compressed inside the file), ``format``,
    ``close()``; ``on_bytes(position)`` after each row group. A file that cannot be opened yields one error (row 0).
    Opened through :class:`workers.fcr.source.RunLogSource`, which passes its ``limits`` (None: the environment's)."""

    compressed = False
    format = FORMAT

    def __init__(
        self,
        path,
        on_bytes: Callable[[int], None] | None = None,
        groups: range | None = None,
        limits: ReadLimits | None = None,
    ):
        self.path, self.on_bytes, self.groups, self.limits = path, on_bytes, groups, limits
        self.position = 0
        self.line_no = 0

    def __iter__(self):
        def bytes_done(done, _total):
            self.position = done
            if self.on_bytes is not None:
                self.on_bytes(done)

        for self.line_no, rec in iter_records_or_errors(self.path, bytes_done, groups=self.groups, limits=self.limits):
            yield self.line_no, rec

    def run_log(self) -> RunLog:
        """The open file under the reader's limits (the column validator reads its row groups itself)."""
        return RunLog(self.path, self.limits)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_row(path, row_no: int, limits: ReadLimits | None = None) -> dict | None:
    """The record in row ``row_no`` (1-based), reading only its row group; None when the file has no such row.
    Raises :class:`FcrParseError` when the file or that row cannot be read as a record."""
    log = RunLog(path, limits)
    try:
        for g in range(log.num_row_groups):
            if log.starts[g] < row_no <= log.starts[g + 1]:
                table = log.read(g).slice(row_no - 1 - log.starts[g], 1)
                for _, rec in table_records(table, row_no):
                    if isinstance(rec, FcrParseError):
                        raise rec
                    return rec
        return None
    finally:
        log.close()


def head_issues(path, max_records: int = 256, max_errors: int = 20) -> tuple[list[dict], int]:
    """The upload pre-flight for ``fcr-parquet/1``: the footer and schema, then the first ``max_records`` rows through
    ``validate_record``, read as a bounded sample (:meth:`RunLog.head`: at most :data:`PREFLIGHT_DECODED_BYTES`
    decoded, checked before decoding; the rest of the file is the validation job's). Returns ``(errors as dicts with
    the row number in 'line', rows checked)``."""

    def issue(exc: FcrParseError) -> dict:
        return {"line": exc.line, "call_id": None, "field": exc.field or "", "reason": exc.reason}

    try:
        log = RunLog(path)
    except FcrParseError as exc:
        return [issue(exc)], 0
    try:
        table = log.head(max_records)
    except FcrParseError as exc:
        return [issue(exc)], 0
    finally:
        log.close()
    errors: list[dict] = []
    checked = 0
    if table is None:
        return errors, checked
    for row_no, rec in table_records(table, 1):
        if isinstance(rec, FcrParseError):
            errors.append(issue(rec))
        else:
            checked += 1
            errors.extend(i.to_dict() for i in validate_record(rec, line=row_no) if i.severity == "error")
        if len(errors) >= max_errors:
            break
    return errors[:max_errors], checked
