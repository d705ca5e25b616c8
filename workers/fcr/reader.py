"""Streaming line reader for ``fcr/1`` JSONL files, plain or gzip (spec/fidelity.md §4.1).

Memory is bounded by one line: the file is never read whole. Gzip is detected from the magic bytes,
not the file name, so an upload named ``run.jsonl`` that is really gzip still reads.
"""
from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from typing import BinaryIO

import orjson

GZIP_MAGIC = b"\x1f\x8b"
READ_BUFFER = 1 << 20


class FcrParseError(ValueError):
    """A record that cannot be read: carries the 1-based line number and the reason."""

    def __init__(self, line: int, reason: str, field: str | None = None):
        self.line = line
        self.reason = reason
        self.field = field
        where = f"line {line}" + (f", field {field}" if field else "")
        super().__init__(f"{where}: {reason}")


def open_binary(path) -> BinaryIO:
    """Open ``path`` for binary reading, transparently decompressing gzip."""
    raw = open(path, "rb")
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if head == GZIP_MAGIC:
        return io.BufferedReader(gzip.GzipFile(fileobj=raw, mode="rb"), buffer_size=READ_BUFFER)
    return raw


def iter_lines(path) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw_line)`` for every non-blank line.

    A truncated or corrupt gzip stream raises :class:`FcrParseError` naming the last line read.
    """
    line_no = 0
    with open_binary(path) as fh:
        try:
            for line_no, line in enumerate(fh, start=1):
                if line.strip():
                    yield line_no, line
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            raise FcrParseError(line_no + 1, f"compressed stream is truncated or corrupt ({exc})") from exc


def iter_records(path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` parsed with orjson; a line that is not a JSON object raises."""
    for line_no, line in iter_lines(path):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise FcrParseError(line_no, f"not valid JSON ({exc})") from exc
        if not isinstance(record, dict):
            raise FcrParseError(line_no, f"expected a JSON object, got {type(record).__name__}")
        yield line_no, record
