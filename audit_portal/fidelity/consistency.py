"""The fidelity app's consistency check (registered with :mod:`audit_portal.jobs.consistency`): a succeeded audit
left one complete report with a PASS/FAIL verdict, one call row per audited line and its loss-mask export files."""

from __future__ import annotations

from audit_portal.core.storage import artifact_path
from audit_portal.fidelity.models import FidelityReport
from audit_portal.jobs.consistency import Report, register_job_check, rows_per_line
from audit_portal.jobs.models import Job
from audit_portal.runs.consistency import result_of


@register_job_check("fidelity_audit")
def check_audited(report: Report, job: Job) -> None:
    upload, fr = result_of(report, job, FidelityReport, "audited", "fidelity report", "fidelity_reports")
    if fr is None:
        return
    if fr.state != FidelityReport.State.COMPLETE or fr.verdict not in ("PASS", "FAIL"):
        report.problem(
            f"fidelity report {fr.pk} of upload {upload.pk} is {fr.state} with verdict {fr.verdict!r} "
            f"although job {job.pk} succeeded"
        )
    rows_per_line(report, f"fidelity report {fr.pk}", fr.calls, fr.calls_total, "call rows", "audited")
    for fmt, info in ((fr.mask_export or {}).get("files") or {}).items():
        if not artifact_path(info.get("storage_name", "")).is_file():
            report.problem(f"fidelity report {fr.pk}: loss-mask export ({fmt}) {info.get('storage_name')} is missing")
