"""Structural validation of ``fcr/1`` records and files (docs/fcr.md#record-fields, docs/fcr.md#conventions; audit
rule R0): :func:`validate_file` for a whole upload; :func:`validate_record`, the check of one parsed record, lives in
:mod:`workers.fcr.record_check` (the readers use it too) and is re-exported here.

What this checks is the *upload format*: required fields present with the right JSON types, ``schema ==
"fcr/1"``, the role / provenance enums, and that every per-token array under ``rollout``/``trainer`` is aligned
1:1 with ``response.token_ids``. The checks live by section of the format: :mod:`workers.fcr.sections` (the
fields of each section), :mod:`workers.fcr.tokens` (per-token lists), :mod:`workers.fcr.topk` (top-K lists),
:mod:`workers.fcr.routes` (MoE routes); the vocabulary is :mod:`workers.fcr.schema`. What the *audit* judges
(sentinel or positive log-probs, hash mismatches, unknown engine enums) is a ``warning`` at most.

A file is read through the one door for run logs (:class:`workers.fcr.source.RunLogSource`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

import orjson

from workers.fcr.columnar import RowReader
from workers.fcr.gc_pause import GcPaused
from workers.fcr.reader import FcrParseError
from workers.fcr.record_check import validate_record
from workers.fcr.routes import LayerCounts, has_routes, n_layers
from workers.fcr.run_params import RunParams
from workers.fcr.schema import FcrIssue, ids_sha256
from workers.fcr.tokens import array_bools_possible, check_logprobs, positive_logprob_issues
from workers.fcr.topk import check_topk, topk_arrays, topk_checked, topk_uncovered
from workers.fcr.source import RunLogSource
from workers.fcr.validate_columnar import read_columns_into

# Other engines' intake (workers.certify, workers.fidelity, workers.routing) imports these from here
__all__ = [
    "FcrIssue",
    "array_bools_possible",
    "check_logprobs",
    "check_topk",
    "ids_sha256",
    "positive_logprob_issues",
    "topk_arrays",
    "topk_checked",
    "topk_uncovered",
    "validate_file",
    "validate_record",
]


# --------------------------------------------------------------------------------------------- file
RUNS_CAP = 1000


class Tally:
    """What :func:`validate_file` keeps: the first issues and their totals, and the summary of the valid records.
    Bounded: a set of ``(run_id, call_id)`` hashes (duplicate detection) and at most ``RUNS_CAP`` run ids."""

    def __init__(
        self,
        max_errors: int,
        max_warnings: int,
        *,
        piece: bool = False,
        known_layers: dict | None = None,
        known_params: dict | None = None,
    ):
        self.max_errors, self.max_warnings = max_errors, max_warnings
        self.errors: list[dict] = []
        self.warnings: list[dict] = []
        self.n_err = self.n_warn = 0
        self.records = self.valid_records = self.routed_records = 0
        self.runs: set[str] = set()
        self.runs_truncated = False
        self.step_min = self.step_max = None
        self.by_role = {"policy": 0, "background": 0, "unknown": 0}
        self.policy_tokens = self.response_tokens = 0
        self.has_trainer_lp = self.has_topk = False
        self.seen: set[int] = set()
        self.dups = 0
        self.layer_counts = LayerCounts()
        # a piece of a file (workers/fcr/validate_pieces.py) also keeps what the merge needs: run ids in the order
        # first seen, each call key's first line (stable 64-bit keys: pieces are read by different processes), and
        # starts from the layer counts the earlier pieces established
        self.piece = piece
        self.run_order: list[str] = []
        self.first_keys: dict[int, tuple[int, str]] = {}
        self.known_layers = dict(known_layers or {})
        self.layer_counts.seen.update(self.known_layers)
        self.known_params = known_params or {}
        self.params = RunParams(self.known_params)  # run_config / run_tags, one value per run
        self.stopped = False

    def add(self, issue: FcrIssue) -> None:
        if issue.severity == "error":
            self.n_err += 1
            if len(self.errors) < self.max_errors:
                self.errors.append(issue.to_dict())
        else:
            self.n_warn += 1
            if len(self.warnings) < self.max_warnings:
                self.warnings.append(issue.to_dict())

    def check(self, rec, line_no: int, no_bools: bool, *, check_hashes: bool, lint: bool) -> None:
        """One parsed record: its issues, then (when it has no error) its share of the summary."""
        bad = False
        for iss in validate_record(rec, line=line_no, check_hashes=check_hashes, lint=lint, no_array_bools=no_bools):
            self.add(iss)
            bad = bad or iss.severity == "error"
        if not bad and has_routes(rec):  # the layer count must be the same for a model across the file
            reason = self.layer_counts.check(rec, line_no)
            if reason:
                self.add(FcrIssue(line_no, rec["call_id"], "rollout.routed_experts", reason))
                bad = True
            elif n_layers(rec) is not None:
                self.routed_records += 1
        if not bad:
            bad = not self.declared(rec, line_no)
        if bad:
            return
        if not lint:  # with lint the record's own warnings already include these
            for iss in positive_logprob_issues(rec, line_no):
                self.add(iss)
        self._count(rec, line_no)

    def declared(self, rec: dict, line_no: int) -> bool:
        """A well-formed record's run parameters agree with its run's (else an error, and False)."""
        issue = self.params.check(rec, line_no)
        if issue is not None:
            self.add(issue)
        return issue is None

    def _count(self, rec: dict, line_no: int, nt: int | None = None) -> None:
        """A valid record's share of the summary; ``nt``: its response length when ``rec`` does not hold the ids
        (a light record of :mod:`workers.fcr.validate_columnar`)."""
        self.valid_records += 1
        run_id = rec["run_id"]
        if run_id not in self.runs:
            if len(self.runs) < RUNS_CAP:
                self.runs.add(run_id)
                self.run_order.append(run_id)
            else:
                self.runs_truncated = True
        st = rec["step"]
        if self.step_min is None or st < self.step_min:
            self.step_min = st
        if self.step_max is None or st > self.step_max:
            self.step_max = st
        role = rec["role"]
        self.by_role[role] += 1
        if nt is None:
            nt = len(rec["response"]["token_ids"])
        self.response_tokens += nt
        if role == "policy":
            self.policy_tokens += nt
        tr = rec.get("trainer")
        if tr and tr.get("logprobs") is not None:
            self.has_trainer_lp = True
        if rec["rollout"].get("top_k") is not None:
            self.has_topk = True
        if self.piece:
            key = call_key(run_id, rec["call_id"])
            if key in self.first_keys:
                self.duplicate(line_no, rec["call_id"])
            else:
                self.first_keys[key] = (line_no, rec["call_id"])
            return
        key = hash((run_id, rec["call_id"]))
        if key in self.seen:
            self.duplicate(line_no, rec["call_id"])
        else:
            self.seen.add(key)

    def duplicate(self, line_no: int, call_id) -> None:
        self.dups += 1
        self.add(FcrIssue(line_no, call_id, "call_id", "duplicate call_id in run", "warning"))

    def summary(self, reader, bytes_read: int, size: int) -> dict:
        """The validator's summary (``reader``: its ``compressed`` and ``format`` are reported)."""
        if self.records == 0 and self.n_err == 0:
            self.add(FcrIssue(0, None, "", "file contains no records"))
        return {
            "valid": self.n_err == 0,
            "records": self.records,
            "valid_records": self.valid_records,
            "errors": self.errors,
            "error_count": self.n_err,
            "warnings": self.warnings,
            "warning_count": self.n_warn,
            "bytes_read": bytes_read,
            "file_size": size,
            "compressed": reader.compressed,
            "format": getattr(reader, "format", "fcr/1"),
            "runs": sorted(self.runs),
            "runs_truncated": self.runs_truncated,
            "steps": {"min": self.step_min, "max": self.step_max},
            "calls_by_role": self.by_role,
            "policy_tokens": self.policy_tokens,
            "response_tokens": self.response_tokens,
            "has_trainer_logprobs": self.has_trainer_lp,
            "has_top_k": self.has_topk,
            "duplicate_call_ids": self.dups,
            "records_with_routes": self.routed_records,
            "run_params": self.params.summary(),
        }


def validate_file(
    path,
    *,
    max_errors: int = 20,
    max_warnings: int = 20,
    progress: Callable[[float, str], None] | None = None,
    progress_every_bytes: int = 8 << 20,
    check_hashes: bool = False,
    lint: bool = False,
    by_columns: bool = True,
) -> dict:
    """Stream-validate an ``fcr/1`` JSONL file (plain or gzip by magic) or an ``fcr-parquet/1`` file, through the one
    reader of each (:meth:`workers.fcr.source.RunLogSource.reader`). Memory: one line (row group) plus :class:`Tally`.

    Never raises on bad content: unparseable lines, non-object lines, truncated gzip and a line or decompression
    limit of the bounded reader (:mod:`workers.fcr.reader`; reading stops there) become errors with their 1-based
    line number. ``progress(fraction, message)`` is called about every ``progress_every_bytes``
    of *compressed* input, with fraction = bytes consumed / file size, and once with 1.0 at the end.
    """
    size = os.path.getsize(path)
    tally = Tally(max_errors, max_warnings)
    next_report = progress_every_bytes

    def report(pos):  # by file bytes consumed: for gzip also called while inside one long line
        nonlocal next_report
        if pos >= next_report:
            next_report = pos + progress_every_bytes
            progress(min(1.0, pos / size) if size else 1.0, f"line {reader.line_no + 1}")

    reader = RunLogSource(path).reader(on_bytes=report if progress is not None else None)
    line_no, bytes_read = read_into(
        tally,
        reader,
        report if progress is not None else None,
        check_hashes=check_hashes,
        lint=lint,
        by_columns=by_columns,
    )
    if progress is not None:
        progress(1.0, f"done: {line_no} lines")
    return tally.summary(reader, bytes_read, size)


def read_into(
    tally: Tally, reader, report=None, *, check_hashes: bool = False, lint: bool = False, by_columns: bool = True
) -> tuple[int, int]:
    """Every line (row) of ``reader`` into ``tally``; closes the reader. Returns the last line number and the file
    bytes consumed. A truncated or corrupt stream, or a read limit, is an error at its line and stops the reading
    there (``tally.stopped``). An ``fcr-parquet/1`` reader is checked by columns
    (:mod:`workers.fcr.validate_columnar`, the same verdict) unless ``by_columns=False`` (every row as a record) or
    ``lint`` / ``check_hashes`` ask for what only the record path does."""
    if by_columns and isinstance(reader, RowReader) and not check_hashes and not lint:  # fcr-parquet/1: by columns
        return read_columns_into(tally, reader)
    loads, JSONDecodeError = orjson.loads, orjson.JSONDecodeError
    line_no = 0
    try:
        with GcPaused() as gc_pause:  # large records would trigger full collections of the whole heap (gc_pause.py)
            for line_no, line in reader:
                gc_pause.tick()
                if (
                    type(line) is not bytes
                ):  # an fcr-parquet/1 row (workers/fcr/columnar.py): a record, or why it is not
                    tally.records += 1
                    if isinstance(line, FcrParseError):
                        tally.add(FcrIssue(line_no, None, line.field or "", line.reason))
                        continue
                    rec, no_bools = line, True  # typed columns: no JSON boolean can stand in for a number
                else:
                    if report is not None and not reader.compressed:
                        report(reader.position)
                    if line.isspace():
                        continue
                    tally.records += 1
                    try:
                        rec = loads(line)
                    except JSONDecodeError as exc:
                        tally.add(FcrIssue(line_no, None, "", f"not valid JSON ({exc})"))
                        continue
                    no_bools = not array_bools_possible(line)
                tally.check(rec, line_no, no_bools, check_hashes=check_hashes, lint=lint)
    except FcrParseError as exc:  # truncated/corrupt gzip, or a line or decompression limit: reading stops there
        tally.add(FcrIssue(exc.line, None, "", exc.reason))
        tally.stopped = True
    finally:
        bytes_read = reader.position
        reader.close()
    return line_no, bytes_read


def call_key(run_id: str, call_id) -> int:
    """A call's (run_id, call_id) as 64 bits that every process computes alike (Python's hash() is salted per
    process)."""
    digest = hashlib.blake2b(f"{run_id}\x00{call_id}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")
