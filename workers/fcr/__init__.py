"""The ``fcr/1`` run-log format (docs/fcr.md): the one door for reading a run log (``RunLogSource``: JSONL, gzip or
Parquet, whole or a piece, under one set of read limits), the bounded line reader behind it, where a file can be cut,
and the validator (its checks by section of the record: schema, sections, tokens, topk, routes).

No Django, no torch: used by the upload validator and pre-flight, the certificate engine, the fidelity audit, the
routing audit and the importers.
"""

from workers.fcr.chunks import Chunk, chunk_ranges, open_chunk, open_reader
from workers.fcr.source import RunLogSource
from workers.fcr.reader import (
    FcrLimitError,
    FcrParseError,
    LineReader,
    ReadLimits,
    iter_lines,
    iter_records,
    open_binary,
)
from workers.fcr.validate import FcrIssue, validate_file, validate_record

__all__ = [
    "Chunk",
    "FcrIssue",
    "FcrLimitError",
    "FcrParseError",
    "LineReader",
    "ReadLimits",
    "RunLogSource",
    "chunk_ranges",
    "iter_lines",
    "iter_records",
    "open_binary",
    "open_chunk",
    "open_reader",
    "validate_file",
    "validate_record",
]
