"""The one door for reading a run log (docs/fcr.md#reading-a-run-log): :class:`RunLogSource`.

Every engine that reads an uploaded run log — the validator (whole file or a piece), ``certify_file`` and
``certify_part``, the fidelity audit, the trainer side of the join, the routing audit — opens it here, so that what
a file is and how it may be read is decided in one place:

* **What the file is**, from its first bytes, never its name: ``fcr-parquet/1`` (the Parquet magic), gzip JSONL
  (the gzip magic) or plain JSONL.
* **Which part of it**: the whole file, or one piece of :func:`workers.fcr.chunks.chunk_ranges` (a :class:`Chunk`:
  a byte range of plain JSONL, a range of Parquet row groups, or the whole file). Line and row numbers are always
  those of the whole file.
* **Under which limits**: one :class:`~workers.fcr.reader.ReadLimits` (line length, gzip inflation, Parquet row-group
  and decoded sizes); None reads the deployment's settings from the environment when a reader opens.
* **The readers**, all bounded, each with the same policy for a truncated, corrupt or over-limit file (every
  complete line or row first, then a typed :class:`~workers.fcr.reader.FcrParseError` naming the line or row where
  reading stopped): :meth:`~RunLogSource.reader` (raw lines or rows, what the validator walks),
  :meth:`~RunLogSource.lines` (the raw lines of JSONL), :meth:`~RunLogSource.run_log` (the row groups of Parquet,
  for engines that read columns), :meth:`~RunLogSource.rows` (Parquet rows as records or why not),
  :meth:`~RunLogSource.records` (parsed records of either format), :meth:`~RunLogSource.record_at` (one record
  by its number, for the portal's drill-down) and :meth:`~RunLogSource.table_batches` (a Parquet table that is not
  a run log: a trainer side written with the same column names).

Opening a source reads a few bytes; nothing is read until a reader is asked for. No Django import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson

from workers.fcr.columnar import FORMAT, FORMAT_KEY, RowReader, RunLog, is_parquet, iter_records_or_errors, read_row
from workers.fcr.reader import GZIP_MAGIC, FcrParseError, LineReader, ReadLimits

JSONL = "fcr/1"


@dataclass(frozen=True)
class Chunk:
    """One piece of a run log: ``kind`` "lines" (byte range of plain JSONL), "row_groups" (Parquet row groups) or
    "whole" (the file, read by one reader); ``[start, end)`` in bytes or row-group indices; ``first_line`` the
    1-based line (row) number of the piece's first line (row) in the whole file."""

    index: int
    kind: str
    start: int
    end: int
    first_line: int

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "kind": self.kind,
            "start": self.start,
            "end": self.end,
            "first_line": self.first_line,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Chunk":  # a Celery message carries the chunk as JSON
        return cls(int(d["index"]), str(d["kind"]), int(d["start"]), int(d["end"]), int(d["first_line"]))


PIECE_KINDS = ("lines", "row_groups", "whole")


class RunLogSource:
    """A run log, or one piece of it (``piece``: a :class:`Chunk`, its dict, or None for the whole file), with the
    limits it is read under (see the module docstring). Attributes: ``path``, ``piece``, ``limits``, ``size`` (file
    bytes), ``parquet``, ``compressed`` (gzip JSONL), ``format`` ("fcr/1" or "fcr-parquet/1")."""

    def __init__(self, path, piece: Chunk | dict | None = None, *, limits: ReadLimits | None = None):
        if isinstance(piece, dict):
            piece = Chunk.from_dict(piece)
        if piece is not None and piece.kind not in PIECE_KINDS:
            raise ValueError(f"unknown chunk kind {piece.kind!r}")
        self.path, self.piece, self.limits = path, piece, limits
        self.size = os.path.getsize(path)
        self.parquet = is_parquet(path)
        self.compressed = not self.parquet and _starts_with(path, GZIP_MAGIC)
        self.format = FORMAT if self.parquet else JSONL

    @property
    def groups(self) -> range | None:
        """The row groups of a "row_groups" piece (None: every row group)."""
        if self.piece is not None and self.piece.kind == "row_groups":
            return range(self.piece.start, self.piece.end)
        return None

    def reader(self, *, on_bytes: Callable[[int], None] | None = None):
        """The piece's raw reader, iterated as ``(line or row number, item)``: for JSONL a
        :class:`~workers.fcr.reader.LineReader` (``item`` the raw line, blank ones included), for Parquet a
        :class:`~workers.fcr.columnar.RowReader` (``item`` a record dict, or an
        :class:`~workers.fcr.reader.FcrParseError` for a row that is not one). A "lines" piece of a Parquet file
        (or a "row_groups" piece of JSONL) is read by the file's own kind, as the piece's numbers say nothing to it."""
        kind = "whole" if self.piece is None else self.piece.kind
        if kind == "row_groups" or (kind == "whole" and self.parquet):
            return RowReader(self.path, on_bytes=on_bytes, groups=self.groups, limits=self.limits)
        return self.lines(on_bytes=on_bytes)

    def lines(self, *, on_bytes: Callable[[int], None] | None = None) -> LineReader:
        """The bounded line reader of a JSONL source (plain or gzip), restricted to a "lines" piece's byte range."""
        if self.piece is not None and self.piece.kind == "lines":
            p = self.piece
            return LineReader(
                self.path, start=p.start, end=p.end, first_line=p.first_line, on_bytes=on_bytes, limits=self.limits
            )
        return LineReader(self.path, on_bytes=on_bytes, limits=self.limits)

    def run_log(self) -> RunLog:
        """The open ``fcr-parquet/1`` file (footer and schema checked; row groups read one at a time under the
        decoded-size limit); raises :class:`~workers.fcr.reader.FcrParseError` when it cannot be opened."""
        return RunLog(self.path, self.limits)

    def rows(
        self, progress: Callable[[int, int], None] | None = None, *, numpy_routes: bool = False
    ) -> Iterator[tuple[int, dict | FcrParseError]]:
        """``(row number, record or FcrParseError)`` for the Parquet rows of the piece, one row group in memory at a
        time; ``progress(compressed bytes read, file's compressed total)`` after each row group."""
        return iter_records_or_errors(
            self.path, progress, numpy_routes=numpy_routes, groups=self.groups, limits=self.limits
        )

    def records(self, *, numpy_routes: bool = False) -> Iterator[tuple[int, dict]]:
        """``(line or row number, record)`` for every record of either format; raises
        :class:`~workers.fcr.reader.FcrParseError` (naming the line or row) at the first one that is not a JSON
        object or cannot be read. ``numpy_routes``: Parquet MoE routes as numpy arrays."""
        if self.parquet:
            for number, rec in self.rows(numpy_routes=numpy_routes):
                if isinstance(rec, FcrParseError):
                    raise rec
                yield number, rec
            return
        for line_no, line in self.lines():
            if line.isspace():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise FcrParseError(line_no, f"not valid JSON ({exc})") from exc
            if not isinstance(record, dict):
                raise FcrParseError(line_no, f"expected a JSON object, got {type(record).__name__}")
            yield line_no, record

    def record_at(self, number: int, byte_offset: int | None = None) -> bytes | dict | None:
        """One record by its line (row) number, without reading the file before it where that can be avoided:
        Parquet reads only the row group holding the row (the record dict); plain JSONL reads the one line at
        ``byte_offset`` (which must be that line's start), gzip is streamed up to the line (the raw line). None when
        the file has no such line. Raises :class:`~workers.fcr.reader.FcrParseError` (unreadable) or ValueError (an
        offset that is not a line start)."""
        if self.parquet:
            return read_row(self.path, number, self.limits)
        start = byte_offset if byte_offset is not None else 0
        with LineReader(self.path, start=start, first_line=number if start else 1, limits=self.limits) as reader:
            for line_no, line in reader:
                if line_no == number:
                    return line
        return None

    def is_run_log_parquet(self) -> bool:
        """Whether a Parquet source declares ``fcr-parquet/1`` in its metadata (else it is some other table)."""
        import pyarrow.parquet as pq

        if not self.parquet:
            return False
        pf = pq.ParquetFile(self.path)
        try:
            return FORMAT_KEY in (pf.schema_arrow.metadata or {})
        finally:
            pf.close()

    def table_batches(self, batch_size: int = 1024) -> Iterator[list[dict]]:
        """The rows of a Parquet table that is not a run log (a trainer side with the join's column names), as
        lists of dicts, ``batch_size`` rows at a time."""
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(self.path)
        try:
            for batch in pf.iter_batches(batch_size=batch_size):
                yield batch.to_pylist()
        finally:
            pf.close()


def _starts_with(path, magic: bytes) -> bool:
    with open(path, "rb") as fh:
        return fh.read(len(magic)) == magic


def open_reader(path, *, on_bytes: Callable[[int], None] | None = None, limits: ReadLimits | None = None):
    """The raw reader of the whole file (:meth:`RunLogSource.reader`)."""
    return RunLogSource(path, limits=limits).reader(on_bytes=on_bytes)


def open_chunk(path, chunk: Chunk, *, on_bytes: Callable[[int], None] | None = None, limits: ReadLimits | None = None):
    """The raw reader of one piece from :func:`workers.fcr.chunks.chunk_ranges` (line and row numbers are those of
    the whole file)."""
    return RunLogSource(path, chunk, limits=limits).reader(on_bytes=on_bytes)
