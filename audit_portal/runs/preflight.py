"""Synchronous checks made while an upload request is still open, so that obviously bad files get an
immediate 4xx and nothing is stored: format sniffing, compression integrity, and the schema of the
first records (the whole file when it is small). The full streaming validation runs as a job."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from workers.fcr.validate import validate_record

PARQUET_MAGIC = b"PAR1"

MAX_PREFLIGHT_ERRORS = 20


@dataclass
class Preflight:
    ok: bool
    code: str = ""
    message: str = ""
    errors: list[dict] = field(default_factory=list)
    records_checked: int = 0


def preflight(upload) -> Preflight:
    if upload.size == 0:
        return Preflight(False, "empty_upload", "The uploaded file is empty.")
    if upload.stream_error:  # truncated/corrupt gzip, or a line / decompression limit of workers/fcr/reader.py
        return Preflight(
            False,
            getattr(upload, "stream_error_code", None) or "corrupt_compression",
            f"{upload.name}: {upload.stream_error}.",
        )
    head = upload.head
    if head[:4] == PARQUET_MAGIC:
        return _parquet(upload)
    if not head.lstrip()[:1] == b"{":
        return Preflight(
            False,
            "unsupported_upload_format",
            "Expected fcr/1 JSONL (one JSON object per line), optionally gzip-compressed, or fcr-parquet/1; "
            f"the file starts with {head[:16]!r}.",
        )
    lines = head.split(b"\n")
    if not upload.head_is_whole:
        lines = lines[:-1]  # the last line of a partial head may be cut in the middle
    errors: list[dict] = []
    checked = 0
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        checked += 1
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            errors.append({"line": line_no, "call_id": None, "field": "", "reason": f"not valid JSON ({exc})"})
        else:
            if not isinstance(record, dict):
                errors.append(
                    {
                        "line": line_no,
                        "call_id": None,
                        "field": "",
                        "reason": f"expected a JSON object, got {type(record).__name__}",
                    }
                )
            else:
                errors.extend(i.to_dict() for i in validate_record(record, line=line_no) if i.severity == "error")
        if len(errors) >= MAX_PREFLIGHT_ERRORS:
            break
    if errors:
        first = errors[0]
        return Preflight(
            False,
            "invalid_run_log",
            f"line {first['line']}: {first.get('field') or 'record'}: {first['reason']}",
            errors[:MAX_PREFLIGHT_ERRORS],
            checked,
        )
    return Preflight(True, records_checked=checked)


def _parquet(upload) -> Preflight:
    """fcr-parquet/1 (workers/fcr/columnar.py): footer, schema and the first rows; the rest is the validation job's."""
    from workers.fcr.columnar import head_issues

    if upload.compression != "none":
        return Preflight(
            False,
            "unsupported_upload_format",
            f"{upload.name}: a gzip-compressed Parquet file; upload the .parquet file itself (its pages "
            "are compressed inside the file).",
        )
    errors, checked = head_issues(upload.temporary_file_path(), max_errors=MAX_PREFLIGHT_ERRORS)
    if errors:
        first = errors[0]
        return Preflight(
            False,
            "invalid_run_log",
            f"row {first['line']}: {first.get('field') or 'record'}: {first['reason']}",
            errors,
            checked,
        )
    return Preflight(True, records_checked=checked)
