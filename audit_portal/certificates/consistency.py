"""The certificates app's consistency checks (registered with :mod:`audit_portal.jobs.consistency`): a succeeded
certification left one complete certificate, one sequence summary per certified line and one aggregate per step;
a pending certificate no live job is writing is reported as a leftover."""

from __future__ import annotations

from django.db.models import Count

from audit_portal.certificates.models import RunCertificate
from audit_portal.jobs.consistency import Report, Scope, register, register_job_check, rows_per_line
from audit_portal.jobs.models import Job, JobState
from audit_portal.runs.consistency import result_of


@register_job_check("certify_upload")
def check_certified(report: Report, job: Job) -> None:
    upload, cert = result_of(report, job, RunCertificate, "certified", "certificate", "certificates")
    if cert is None:
        return
    if cert.state != RunCertificate.State.COMPLETE:
        report.problem(f"certificate {cert.pk} of upload {upload.pk} is {cert.state} although job {job.pk} succeeded")
    if (job.result or {}).get("certificate") not in (None, cert.pk):
        report.problem(
            f"job {job.pk} names certificate {job.result.get('certificate')} but upload {upload.pk} "
            f"holds certificate {cert.pk}"
        )
    rows_per_line(
        report, f"certificate {cert.pk}", cert.sequence_summaries, cert.sequences, "sequence summaries", "certified"
    )
    if cert.steps.values("step").annotate(n=Count("id")).filter(n__gt=1).exists():
        report.problem(f"certificate {cert.pk}: a step has more than one aggregate (duplicate results)")


@register
def check_leftovers_of_failed_jobs(report: Report, scope: Scope) -> None:
    pending = RunCertificate.objects.filter(state=RunCertificate.State.PENDING)
    active = set(
        scope.scoped(Job.objects.all())
        .filter(kind="certify_upload", state__in=[JobState.QUEUED, JobState.RUNNING])
        .values_list("subject_id", flat=True)
    )
    for cert in pending.only("pk", "upload_id"):
        if cert.upload_id not in active:
            report.warn(
                f"certificate {cert.pk} of upload {cert.upload_id} is a partial (pending) leftover of a "
                "failed or cancelled job; it is not shown and a new job replaces it"
            )
