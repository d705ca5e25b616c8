"""Where a run log can be cut so that several workers read it at once, and the one way to open a file or a piece.

Contract (for chunked certification, validation or audit):

* :func:`chunk_ranges` ``(path, target_bytes)`` → a list of :class:`Chunk` that together cover every record of the
  file exactly once, in file order, each about ``target_bytes`` of file bytes (at least one line or row group):

  - plain ``fcr/1`` JSONL (``kind="lines"``): byte ranges ``[start, end)`` cut just after a ``\\n``, so every
    chunk starts at a line start; ``first_line`` is the 1-based number of its first line in the whole file (blank
    lines count, as :class:`~workers.fcr.reader.LineReader` counts them), so errors name the same line as a one-pass
    read. Finding the cuts and line numbers costs one sequential pass over the file counting ``\\n`` (C speed,
    1 MiB in memory), no parsing.
  - ``fcr-parquet/1`` (``kind="row_groups"``): consecutive row groups ``[start, end)`` whose compressed sizes add
    up to about ``target_bytes``; ``first_line`` is the 1-based number of the chunk's first row.
  - gzip JSONL (``kind="whole"``): one chunk. A deflate stream cannot be entered in the middle (each block depends
    on the 32 KiB before it), so splitting it would mean decompressing it all first; it is read by one worker. A
    Parquet file whose footer cannot be read is also one ``whole`` chunk, so that the reader reports why.

* :func:`open_chunk` ``(path, chunk)`` → the reader of that piece, iterated as ``(line or row number, item)``: for
  JSONL a :class:`~workers.fcr.reader.LineReader` (``item`` the raw line, blank ones included), for Parquet a
  :class:`~workers.fcr.columnar.RowReader` (``item`` a record dict, or an :class:`~workers.fcr.reader.FcrParseError`
  for a row that is not one). The policy for truncated and malformed input is the reader's (reader.py): every
  complete line first, then a typed error naming the line where reading stopped.
* :func:`open_reader` ``(path)`` → the same for the whole file (JSONL plain or gzip, or Parquet by its magic): the one
  place that decides which reader a file gets.

Memory: :func:`chunk_ranges` holds one 1 MiB block and the list of chunks. No Django, no torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from workers.fcr.reader import GZIP_MAGIC, FcrParseError, LineReader, ReadLimits

SCAN_BLOCK = 1 << 20


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


def chunk_ranges(path, target_bytes: int) -> list[Chunk]:
    """The pieces of ``path`` (see the module docstring), each about ``target_bytes`` of the file."""
    if target_bytes <= 0:
        raise ValueError("target_bytes must be positive")
    from workers.fcr.columnar import is_parquet

    size = os.path.getsize(path)
    if is_parquet(path):
        return _row_group_chunks(path, target_bytes, size)
    with open(path, "rb") as fh:
        if fh.read(2) == GZIP_MAGIC:
            return [Chunk(0, "whole", 0, size, 1)]
    return _line_chunks(path, target_bytes, size)


def _line_chunks(path, target: int, size: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    start, first_line = 0, 1
    newlines = 0  # '\n' bytes before the block's `counted` index
    pos = 0  # file offset of the current block
    with open(path, "rb") as fh:
        while block := fh.read(SCAN_BLOCK):
            counted = 0
            while True:
                # the next cut is just after the first '\n' at or beyond start + target - 1
                j = block.find(b"\n", max(counted, start + target - 1 - pos))
                if j < 0 or pos + j + 1 >= size:  # none in this block, or the file's last byte: no empty chunk
                    break
                newlines += block.count(b"\n", counted, j + 1)
                counted = j + 1
                chunks.append(Chunk(len(chunks), "lines", start, pos + j + 1, first_line))
                start, first_line = pos + j + 1, newlines + 1
            newlines += block.count(b"\n", counted)
            pos += len(block)
    chunks.append(Chunk(len(chunks), "lines", start, size, first_line))
    return chunks


def _row_group_chunks(path, target: int, size: int) -> list[Chunk]:
    from workers.fcr.columnar import RunLog

    try:
        log = RunLog(path)
    except FcrParseError:  # the reader of the whole file says why
        return [Chunk(0, "whole", 0, size, 1)]
    try:
        chunks: list[Chunk] = []
        start, acc = 0, 0
        for g, nbytes in enumerate(log.compressed):
            if g > start and acc + nbytes > target:
                chunks.append(Chunk(len(chunks), "row_groups", start, g, log.starts[start] + 1))
                start, acc = g, 0
            acc += nbytes
        chunks.append(Chunk(len(chunks), "row_groups", start, log.num_row_groups, log.starts[start] + 1))
        return chunks
    finally:
        log.close()


def open_reader(path, *, on_bytes: Callable[[int], None] | None = None, limits: ReadLimits | None = None):
    """The reader of the whole file: :class:`~workers.fcr.columnar.RowReader` for Parquet, else
    :class:`~workers.fcr.reader.LineReader` (plain or gzip)."""
    from workers.fcr.columnar import RowReader, is_parquet

    if is_parquet(path):
        return RowReader(path, on_bytes=on_bytes)
    return LineReader(path, on_bytes=on_bytes, limits=limits)


def open_chunk(path, chunk: Chunk, *, on_bytes: Callable[[int], None] | None = None, limits: ReadLimits | None = None):
    """The reader of one piece from :func:`chunk_ranges` (line and row numbers are those of the whole file)."""
    if chunk.kind == "lines":
        return LineReader(
            path, start=chunk.start, end=chunk.end, first_line=chunk.first_line, on_bytes=on_bytes, limits=limits
        )
    if chunk.kind == "row_groups":
        from workers.fcr.columnar import RowReader

        return RowReader(path, on_bytes=on_bytes, groups=range(chunk.start, chunk.end))
    if chunk.kind == "whole":
        return open_reader(path, on_bytes=on_bytes, limits=limits)
    raise ValueError(f"unknown chunk kind {chunk.kind!r}")
