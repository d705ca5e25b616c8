"""Reads for fidelity reports, calls and tokenizers, scoped by the caller's readable projects."""

from __future__ import annotations

import json

import orjson
from django.db.models import Q

from audit_portal.accounts.principal import Principal
from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.core.errors import PortalError
from audit_portal.fidelity.models import FidelityCall, FidelityReport, RegisteredTokenizer
from audit_portal.core.storage import artifact_path

VERDICTS = ("verifiable", "partial", "excluded")


def reports_for(principal: Principal, project=None):
    qs = FidelityReport.objects.filter(project__in=principal.readable_projects(), state=FidelityReport.State.COMPLETE)
    qs = qs.select_related("project", "run", "upload")
    return qs.filter(project=project) if project is not None else qs


def get_report(principal: Principal, report_id: int) -> FidelityReport:
    return get_scoped_or_404(reports_for(principal), pk=report_id)


def latest_for_run(principal: Principal, run) -> FidelityReport | None:
    return reports_for(principal).filter(run=run).order_by("-created_at", "-id").first()


def reason_codes() -> list[str]:
    from workers.fidelity.rules import CODES  # numpy only: the web tier stays torch-free

    return list(CODES)


def calls(
    report: FidelityReport,
    *,
    verdict: str | None = None,
    reason: str | None = None,
    primary_reason: str | None = None,
    role: str | None = None,
    step: int | None = None,
):
    """A report's calls in file order; ``reason`` matches any listed reason, ``primary_reason`` the first one.
    Unknown values are a 400 naming the accepted ones (a typo must not look like "no such calls")."""
    qs = report.calls.all()
    if verdict:
        if verdict not in VERDICTS:
            raise PortalError(
                f"verdict must be one of {', '.join(VERDICTS)}; got {verdict!r}", code="invalid_parameter"
            )
        qs = qs.filter(verdict=verdict)
    for name, value in (("reason", reason), ("primary_reason", primary_reason)):
        if value and value not in reason_codes():
            raise PortalError(
                f"{name} must be a reason code of the fidelity rules (docs/fidelity-rules.md#rules-r0r9; "
                f"e.g. SENTINEL_LOGPROB, BACKGROUND_CALL); got {value!r}",
                code="invalid_parameter",
            )
    if reason:
        qs = qs.filter(reasons_flat__contains=f"|{reason}|")
    if primary_reason:
        qs = qs.filter(primary_reason=primary_reason)
    if role:
        if role not in ("policy", "background", "unknown"):
            raise PortalError(f"role must be policy, background or unknown; got {role!r}", code="invalid_parameter")
        qs = qs.filter(role=role)
    if step is not None:
        qs = qs.filter(step=step)
    return qs.order_by("line", "id")


def flagged_calls(report: FidelityReport, limit: int = 50):
    """Calls to look at first: closed-failure violations, then the rest that are not verifiable, in file order."""
    return report.calls.filter(Q(closed_failure_violations__gt=0) | ~Q(verdict="verifiable")).order_by(
        "-closed_failure_violations", "line", "id"
    )[:limit]


def calls_for(principal: Principal):
    """The calls of the complete reports the caller may read (a call has no project of its own: its report's)."""
    return FidelityCall.objects.filter(
        report__project__in=principal.readable_projects(), report__state=FidelityReport.State.COMPLETE
    ).select_related("report", "report__project", "report__upload", "report__run")


def get_call(principal: Principal, call_id: int) -> FidelityCall:
    return get_scoped_or_404(calls_for(principal), noun="call", pk=call_id)


def tokenizers_for(principal: Principal, project=None):
    qs = RegisteredTokenizer.objects.filter(project__in=principal.readable_projects()).select_related("project")
    return qs.filter(project=project) if project is not None else qs


def tokenizer_for_sha(project, sha256) -> RegisteredTokenizer | None:
    if not isinstance(sha256, str):
        return None
    return RegisteredTokenizer.objects.filter(project=project, sha256=sha256).first()


class RecordUnavailable(Exception):
    """The call's record can no longer be read from the uploaded file."""


def read_record(call: FidelityCall) -> dict:
    """The call's ``fcr/1`` record, read from the uploaded file in the artifact store (token-level data never sits
    in Postgres). Uncompressed uploads: one seek; gzip: streamed up to the line."""
    from workers.fcr.reader import FcrParseError
    from workers.fcr.source import RunLogSource

    path = artifact_path(call.report.upload.storage_name)
    if not path.exists():
        raise RecordUnavailable("the uploaded file is no longer in the artifact store")
    source = RunLogSource(path)  # the one door for run logs: its bounded readers and limits
    what = "row" if source.parquet else "line"
    try:  # fcr-parquet/1: only the row group holding the row; plain: the one line at its offset; gzip: streamed
        raw = source.record_at(call.line, call.byte_offset)
    except (FcrParseError, ValueError) as exc:  # ValueError: the offset is not a line start
        raise RecordUnavailable(f"{what} {call.line} cannot be read: {exc}") from None
    if isinstance(raw, dict):
        raw = orjson.dumps(raw)
    if raw is None:
        raise RecordUnavailable(f"line {call.line} is not in the uploaded file")
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            record = json.loads(raw)  # NaN / Infinity log-probs are part of what the audit reports
        except ValueError as exc:
            raise RecordUnavailable(f"line {call.line} is not a JSON record ({exc})") from None
    if not isinstance(record, dict):
        raise RecordUnavailable(f"line {call.line} is not a JSON object")
    if call.call_id and str(record.get("call_id"))[:200] != call.call_id:  # stored ids are cut at 200 chars
        raise RecordUnavailable(f"line {call.line} holds call {record.get('call_id')!r}, not {call.call_id!r}")
    return record
