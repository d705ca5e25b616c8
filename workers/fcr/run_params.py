"""The run parameters a log declares (docs/fcr.md#run-parameters): the optional ``run_config`` (an object) and
``run_tags`` (a list of strings) of its records.

A record may carry either or both; the records of one run that carry a field must all carry the same value, so the
run has one config and one tag list whichever record a reader looks at. The validator keeps, per run, the first value
of each field with the record that gave it (line and call id) and refuses a record whose value differs, naming both
records. What the values may hold (key counts, value types, sizes) is the portal's to check
(audit_portal/runs/declarations.py): this module only extracts them, bounded, and stays free of Django.
"""

from __future__ import annotations

import os

import orjson

from workers.fcr.schema import FcrIssue

FIELDS = ("run_config", "run_tags")
VALUE_MAX_BYTES = 64 * 1024  # per field and run, as JSON: what the summary may carry (the portal allows 16 KiB)
RUNS_MAX = 1000  # runs whose declarations are kept and compared (the summary's own cap on run ids)


class RunParams:
    """Per run, the first value of each declared field: ``{run_id: {field: {"value", "line", "call_id"}}}``.
    ``known``: the declarations of earlier pieces of the file (workers/fcr/validate_pieces.py)."""

    def __init__(self, known: dict | None = None):
        self.by_run: dict[str, dict] = {run: dict(fields) for run, fields in (known or {}).items()}

    def check(self, rec: dict, line: int) -> FcrIssue | None:
        """Record the declarations of a well-formed record; the issue that makes it an error, if any."""
        get = rec.get
        if get("run_config") is None and get("run_tags") is None:
            return None
        run = rec["run_id"]
        kept = self.by_run.get(run)
        if kept is None:
            if len(self.by_run) >= RUNS_MAX:  # bounded: later runs' declarations are neither kept nor compared
                return None
            kept = self.by_run[run] = {}
        for field in FIELDS:
            value = get(field)
            if value is None:
                continue
            first = kept.get(field)
            if first is None:
                size = len(orjson.dumps(value))
                if size > VALUE_MAX_BYTES:
                    return FcrIssue(
                        line, rec["call_id"], field, f"at most {VALUE_MAX_BYTES // 1024} KiB as JSON ({size} bytes)"
                    )
                kept[field] = {"value": value, "line": line, "call_id": rec["call_id"]}
            elif first["value"] != value:
                return FcrIssue(
                    line,
                    rec["call_id"],
                    field,
                    f"differs from the {field} of run {run!r} given on line {first['line']} (call "
                    f"{first['call_id']}); the records of a run that carry {field} must all carry the same",
                )
        return None

    def summary(self) -> dict:
        """The runs that declared something (JSON)."""
        return {run: fields for run, fields in self.by_run.items() if fields}

    def new_since(self, known: dict) -> dict:
        """What this piece declared that ``known`` did not hold."""
        out = {}
        for run, fields in self.by_run.items():
            added = {f: v for f, v in fields.items() if f not in (known.get(run) or {})}
            if added:
                out[run] = added
        return out


def disagrees(known: dict, piece: dict) -> bool:
    """Whether a piece's first declarations differ from those of the earlier pieces (it must then be read again)."""
    return any(
        field in (known.get(run) or {}) and known[run][field]["value"] != first["value"]
        for run, fields in piece.items()
        for field, first in fields.items()
    )


def merge(known: dict, piece: dict) -> None:
    """Add a piece's first declarations to ``known`` (earlier pieces' first values stay)."""
    for run, fields in piece.items():
        if run not in known and len(known) >= RUNS_MAX:  # the one-pass bound (a piece alone may keep more)
            continue
        kept = known.setdefault(run, {})
        for field, first in fields.items():
            kept.setdefault(field, first)


def parse_declared(config_text: str | None, tags: list[str] | None) -> dict:
    """The fields an importer's ``--run-config`` (a JSON object, or ``@file`` holding one) and ``--tag`` (repeated)
    declare: ``{"run_config": …, "run_tags": …}`` for those given. ValueError names a bad one."""
    out: dict = {}
    if config_text:
        if config_text.startswith("@"):
            with open(config_text[1:], "rb") as f:
                config_text = f.read().decode()
        try:
            config = orjson.loads(config_text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"--run-config: not valid JSON ({exc})") from None
        if type(config) is not dict:
            raise ValueError("--run-config: a JSON object of parameter names to values")
        out["run_config"] = config
    if tags:
        out["run_tags"] = list(dict.fromkeys(tags))
    return out


def stamp_file(path, declared: dict) -> int:
    """Put ``declared`` (``run_config`` / ``run_tags``) on every record of the fcr/1 JSONL file at ``path``, which an
    importer has just written, in place; returns the number of records. Read through the one reader of run logs; a
    line that is not a record object is kept as it is (the validator names it)."""
    from workers.fcr.source import RunLogSource

    if not declared:
        return 0
    tmp, n = f"{os.fspath(path)}.stamping", 0
    reader = RunLogSource(path).reader()
    try:
        with open(tmp, "wb") as out:
            for _, line in reader:
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    rec = None
                if type(rec) is dict:
                    rec.update(declared)
                    line, n = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS) + b"\n", n + 1
                out.write(line if line.endswith(b"\n") else line + b"\n")
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        reader.close()
    os.replace(tmp, path)
    return n
