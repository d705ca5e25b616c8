"""What the fidelity audit reads (docs/fidelity-rules.md): the records of a JSONL or ``fcr-parquet/1`` file, or of a
list, one at a time with their line numbers, parsed once and checked once by the format's validator.

A file is read through the one door for run logs (workers/fcr/source.py, docs/fcr.md#reading-a-run-log): a
truncated or corrupt gzip stream or a limit yields every complete line, then a :class:`Broken` on the line where
reading stopped, which the audit counts as one unparsed line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import orjson

from workers.fcr.reader import FcrParseError
from workers.fcr.source import RunLogSource
from workers.fcr.validate import array_bools_possible, validate_record
from workers.fidelity.rules import is_critical, topk_checked


class Broken:
    """A line that could not be read: its reason (the audit counts it as one unparsed line)."""

    def __init__(self, reason):
        self.reason = reason


def file_source(path):
    """``() → iterator of (line number, raw line, byte offset | None, fraction of the file read)`` over every
    non-blank line, plain or gzip (by magic; offsets only for plain files), through the one door for run logs
    (workers/fcr/source.py). A truncated or corrupt gzip stream or a line/decompression limit yields every complete
    line, then a :class:`Broken` on the line where reading stopped."""
    source = RunLogSource(path)
    size = max(source.size, 1)
    if source.parquet:
        return parquet_source(source)

    def lines() -> Iterator[tuple]:
        reader = source.lines()
        offsets = not reader.compressed
        try:
            for number, raw in reader:
                if not raw.isspace():
                    yield number, raw, reader.offset - len(raw) if offsets else None, reader.position / size
        except FcrParseError as exc:
            yield exc.line, Broken(exc.reason), None, 1.0

    return lines


def parquet_source(source: RunLogSource):
    """:func:`file_source` for an ``fcr-parquet/1`` source (workers/fcr/columnar.py): ``(row number, record, None,
    fraction)``, one row group in memory at a time; a row that is not a record (or an unreadable file) is a
    :class:`Broken`."""

    def lines() -> Iterator[tuple]:
        done = [0.0]
        for number, rec in source.rows(lambda pos, total: done.__setitem__(0, pos / max(total, 1))):
            if isinstance(rec, FcrParseError):
                yield number, Broken(f"{rec.field + ': ' if rec.field else ''}{rec.reason}"), None, done[0]
            else:
                yield number, rec, None, done[0]

    return lines


def list_source(records: list):
    def lines():
        total = max(len(records), 1)
        for i, r in enumerate(records, start=1):
            yield i, r, None, i / total

    return lines


def parse(raw):
    """→ (record or None, error or None). orjson first; stdlib json accepts NaN/Infinity so R6/R8 can see them."""
    if isinstance(raw, Broken):
        return None, raw.reason
    if isinstance(raw, dict):
        return raw, None
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if isinstance(raw, (bytes, bytearray)):
        if not raw.strip():
            return None, None
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            try:
                rec = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                return None, f"not valid JSON ({exc})"
        if not isinstance(rec, dict):
            return None, f"expected a JSON object, got {type(rec).__name__}"
        return rec, None
    return None, f"expected a JSON object, got {type(raw).__name__}"


class Unauditable:
    """The issue of a record the audit cannot evaluate (e.g. ids beyond int64): it fails closed, not the run."""

    severity = "error"
    field = ""

    def __init__(self, exc):
        self.reason = f"record cannot be audited ({type(exc).__name__}: {exc})"


def record_issues(rec, raw) -> tuple[list, dict]:
    """The record's validator errors, and its top-K lists as arrays when they could be converted on the way.

    The two top-K lists are most of a record's bytes; when the raw line proves that no JSON boolean is an array
    element, :func:`~workers.fidelity.rules.topk_checked` checks and converts each in one set of C-level passes and
    the validator sees the record without them (same verdict: the checks are the validator's own fast-path checks).
    Anything unusual goes to the validator whole, which names the problem."""
    fast = isinstance(raw, (bytes, bytearray)) and not array_bools_possible(raw)
    topk: dict = {}
    view = rec
    if fast:
        resp = rec.get("response")
        ids = resp.get("token_ids") if type(resp) is dict else None
        if type(ids) is list:
            parts = {}
            for part in ("rollout", "trainer"):
                block = rec.get(part)
                if type(block) is dict and block.get("top_k") is not None:
                    arrays = topk_checked(block["top_k"], len(ids))
                    if arrays is None:
                        parts = None
                        break
                    topk[part] = arrays
                    parts[part] = {k: v for k, v in block.items() if k != "top_k"}
            if parts:
                view = {**rec, **parts}
            elif parts is None:
                topk = {}
    return [i for i in validate_record(view, lint=False, no_array_bools=fast) if i.severity == "error"], topk


def critical(issues):
    return [i for i in issues if is_critical(i.field)]
