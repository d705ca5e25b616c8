"""Where a run log can be cut so that several workers read it at once; a piece is read through the one door,
:class:`workers.fcr.source.RunLogSource` (``open_chunk``/``open_reader`` are its shorthands, re-exported here).

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

* :func:`open_chunk` ``(path, chunk)`` (:mod:`workers.fcr.source`) → the reader of that piece, iterated as ``(line or row number, item)``: for
  JSONL a :class:`~workers.fcr.reader.LineReader` (``item`` the raw line, blank ones included), for Parquet a
  :class:`~workers.fcr.columnar.RowReader` (``item`` a record dict, or an :class:`~workers.fcr.reader.FcrParseError`
  for a row that is not one). The policy for truncated and malformed input is the reader's (reader.py): every
  complete line first, then a typed error naming the line where reading stopped.
* :func:`open_reader` ``(path)`` → the same for the whole file (JSONL plain or gzip, or Parquet by its magic);
  :class:`~workers.fcr.source.RunLogSource` is the one place that decides which reader a file gets.

Memory: :func:`chunk_ranges` holds one 1 MiB block and the list of chunks. No Django, no torch.
"""

from __future__ import annotations


from workers.fcr.reader import FcrParseError
from workers.fcr.source import Chunk, RunLogSource, open_chunk, open_reader

__all__ = ["Chunk", "chunk_ranges", "cut_into_pieces", "open_chunk", "open_reader"]  # readers: workers/fcr/source.py

SCAN_BLOCK = 1 << 20


def cut_into_pieces(size_bytes: int, compressed: bool, target_bytes: int) -> bool:
    """Whether a run log is cut into pieces of ``target_bytes`` (0 = never): a plain JSONL or Parquet file larger
    than that; a gzip stream is one piece whatever its size (see the module docstring). The one rule both the
    certification that cuts and the audits that wait for it read."""
    return bool(target_bytes) and size_bytes > target_bytes and not compressed


def chunk_ranges(path, target_bytes: int) -> list[Chunk]:
    """The pieces of ``path`` (see the module docstring), each about ``target_bytes`` of the file."""
    if target_bytes <= 0:
        raise ValueError("target_bytes must be positive")
    source = RunLogSource(path)
    if source.parquet:
        return _row_group_chunks(source, target_bytes)
    if source.compressed:
        return [Chunk(0, "whole", 0, source.size, 1)]
    return _line_chunks(path, target_bytes, source.size)


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


def _row_group_chunks(source: RunLogSource, target: int) -> list[Chunk]:
    try:
        log = source.run_log()
    except FcrParseError:  # the reader of the whole file says why
        return [Chunk(0, "whole", 0, source.size, 1)]
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
