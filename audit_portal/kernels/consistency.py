"""The kernels app's consistency checks (registered with :mod:`audit_portal.jobs.consistency`): a succeeded
conformance job stored one verdict per planned contract and a grade; a succeeded calibration left none pending."""

from __future__ import annotations

from audit_portal.jobs.consistency import Report, register_job_check
from audit_portal.jobs.models import Job
from audit_portal.kernels.models import ContractCalibration, Submission


@register_job_check("run_kernel_submission")
def check_conformance_ran(report: Report, job: Job) -> None:
    submission = Submission.objects.filter(job=job).first()
    if submission is None:
        report.problem(f"job {job.pk} ran a kernel submission that no longer exists")
        return
    report.counts["kernel_submissions"] += 1
    stored = submission.verdicts.count()
    if stored != len(submission.plan):
        report.problem(
            f"submission {submission.pk}: {stored} verdicts stored, {len(submission.plan)} planned "
            f"(job {job.pk} succeeded)"
        )
    if not submission.grade or submission.finished_at is None:
        report.problem(f"submission {submission.pk}: no grade stored although job {job.pk} succeeded")


@register_job_check("calibrate_contracts")
def check_calibrated(report: Report, job: Job) -> None:
    pending = ContractCalibration.objects.filter(job=job, status__in=["queued", "running"]).count()
    if pending:
        report.problem(f"job {job.pk} succeeded but {pending} of its calibrations are still pending")
