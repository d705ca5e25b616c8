"""The structural (R0) check of one parsed ``fcr/1`` record: :func:`validate_record` (docs/fcr.md#record-fields).

It lives apart from the file validator (:mod:`workers.fcr.validate`) because the readers need it too: the Parquet
pre-flight (:func:`workers.fcr.columnar.head_issues`) checks its sample rows with it, while the file validator opens
files through the readers (:mod:`workers.fcr.source`); one module holding both made an import circle.

Speed: the portal validates uploads within 2× a plain ``orjson`` parse. A record is first tried on the fast form of
each section (:func:`_fast_valid`), which accepts exactly the records the section checks find nothing in; only a
record it does not accept goes through the sections, which name every problem.
"""

from __future__ import annotations

from workers.fcr import sections
from workers.fcr.routes import has_routes, routes_issues
from workers.fcr.schema import FcrIssue

_fast_valid = sections.record_ok  # the fast form of the whole record (tests/fcr/test_validate_fuzz.py)


def validate_record(
    rec, *, line: int = 0, check_hashes: bool = False, lint: bool = True, no_array_bools: bool = False
) -> list[FcrIssue]:
    """Structural (R0) issues of one parsed record; an empty list means the record is well-formed.

    ``check_hashes=True`` also recomputes ``ids_sha256`` (a *warning* on mismatch; costs a join per token).
    ``lint=False`` skips the audit-level warnings (sentinel / positive log-probs, top-K coverage).
    ``no_array_bools=True`` is a promise by the caller that no JSON ``true``/``false`` occurs as an array
    element in the source line (:func:`array_bools_possible` checks that on the raw bytes); it enables
    single-pass C conversions (``array('Q')``, ``bytes()``) that would otherwise accept booleans as 0/1.
    """
    if type(rec) is not dict:
        return [FcrIssue(line, None, "", f"expected a JSON object, got {type(rec).__name__}")]
    if not lint and not check_hashes and _fast_valid(rec, no_array_bools):
        issues, n, call_id = [], len(rec["response"]["token_ids"]), rec["call_id"]
    else:
        issues, n, call_id = _by_section(rec, line, fast=no_array_bools, lint=lint, check_hashes=check_hashes)
    if n is not None and has_routes(rec):  # optional MoE routing fields (workers/fcr/routes.py)
        issues += [FcrIssue(line, call_id, field, reason) for field, reason in routes_issues(rec, n)]
    return issues


def _by_section(rec: dict, line: int, **how) -> tuple[list[FcrIssue], int | None, str | None]:
    """Every issue of the record, section by section in field order; also n (the per-token length) and the call id
    the issues carry."""
    cid = rec.get("call_id")
    f = sections.Findings(line, cid if type(cid) is str and cid else None, **how)
    sections.identity(rec, f)
    sections.model_and_engine(rec, f)
    sections.prompt(rec, f)
    n = sections.response(rec, f)
    sections.rollout(rec, n, f)
    sections.trainer(rec, n, f)
    return f.issues, n, f.call_id
