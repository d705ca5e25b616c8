"""Nothing lost: a read-only audit of what the database says against what the artifact store holds.

``check()`` returns problems (the portal's state contradicts itself: a lost file, changed bytes, a finished
job without its results, a job stuck "running" past the heartbeat timeout, a transparency log that does not
verify) and warnings (leftovers that lose nothing, e.g. the partial rows of a failed job). It never writes.
``manage.py check_consistency`` prints them and exits non-zero when there is a problem.
"""
from __future__ import annotations

import hashlib
import importlib
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from audit_portal.jobs.models import Job, JobState

ATTESTATIONS_APP = "audit_portal.attestations"
# Where the transparency log's verify_log() may live (the attestations app is built separately).
VERIFY_LOG_MODULES = ("", ".services", ".log", ".transparency", ".selectors", ".verify")


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    def problem(self, message: str) -> None:
        self.problems.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {"ok": self.ok, "problems": self.problems, "warnings": self.warnings, "checked": dict(self.counts)}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check(*, rehash: bool = True, grace_seconds: float = 300.0, project=None) -> Report:
    report = Report()
    _check_uploads(report, rehash=rehash, project=project)
    _check_stray_files(report, grace_seconds=grace_seconds, project=project)
    _check_jobs(report, project=project)
    _check_transparency_log(report)
    return report


# ------------------------------------------------------------------------------------------ uploads
def _check_uploads(report: Report, *, rehash: bool, project) -> None:
    from audit_portal.runs.models import Upload, UploadStage
    from audit_portal.runs.services import artifact_path, follow_ups_for

    uploads = Upload.objects.all() if project is None else Upload.objects.filter(project=project)
    for up in uploads.filter(duplicate_of__isnull=True).order_by("pk").iterator(chunk_size=500):
        report.counts["uploads"] += 1
        label = f"upload {up.pk} ({up.original_name}, project {up.project_id})"
        if not up.storage_name:
            report.problem(f"{label}: no storage name recorded")
            continue
        path = artifact_path(up.storage_name)
        if not path.is_file():
            report.problem(f"{label}: file {up.storage_name} is missing from the artifact store")
            continue
        size = path.stat().st_size
        if size != up.size_bytes:
            report.problem(f"{label}: file is {size} bytes, {up.size_bytes} recorded")
        elif rehash:
            report.counts["bytes_rehashed"] += size
            actual = sha256_of(path)
            if actual != up.sha256:
                report.problem(f"{label}: SHA-256 of the stored file is {actual[:16]}…, {up.sha256[:16]}… recorded")
        if not up.storage_name.endswith(up.sha256 + (".jsonl.gz" if up.compression == "gzip" else ".jsonl")):
            report.problem(f"{label}: storage name {up.storage_name} does not match its digest")
    for dup in uploads.filter(duplicate_of__isnull=False).select_related("duplicate_of").iterator(chunk_size=500):
        report.counts["duplicate_uploads"] += 1
        if dup.duplicate_of.sha256 != dup.sha256:
            report.problem(f"upload {dup.pk} is recorded as a duplicate of upload {dup.duplicate_of_id} "
                           "but their digests differ")
        if dup.stage != UploadStage.DUPLICATE:
            report.problem(f"upload {dup.pk} has duplicate_of set but stage {dup.stage}")
    # Exactly one original per (project, digest) is a database constraint; pending stages must be moving.
    jobs_by_upload: dict[int, dict[str, Job]] = {}
    upload_jobs = Job.objects.filter(subject_kind="upload")
    if project is not None:
        upload_jobs = upload_jobs.filter(project=project)
    for job in upload_jobs.order_by("created_at", "pk").only("pk", "kind", "state", "subject_id"):
        jobs_by_upload.setdefault(job.subject_id, {})[job.kind] = job  # latest of each kind wins
    for up in uploads.filter(duplicate_of__isnull=True).only("pk", "stage", "original_name").iterator(chunk_size=500):
        jobs = jobs_by_upload.get(up.pk, {})
        validate = jobs.get("validate_upload")
        if up.stage in (UploadStage.RECEIVED, UploadStage.PROCESSING):
            if validate is None:
                report.problem(f"upload {up.pk} is {up.stage} but has no validation job")
            elif validate.state in (JobState.FAILED, JobState.CANCELLED, JobState.SUCCEEDED):
                report.problem(f"upload {up.pk} is still {up.stage} although its validation job {validate.pk} "
                               f"is {validate.state}")
        elif up.stage == UploadStage.VALID:
            for kind, _task, _queue in follow_ups_for(up.validation):
                if kind not in jobs:
                    report.problem(f"upload {up.pk} is valid but its {kind} job was never created")


def _check_stray_files(report: Report, *, grace_seconds: float, project) -> None:
    """Files in the store that no row accounts for: a half-stored upload, or a partial one never cleaned up."""
    if project is not None:
        return  # the store is shared between projects: only a whole-portal check can call a file stray
    from audit_portal.runs.models import Upload

    root = Path(settings.ARTIFACT_ROOT)
    cutoff = time.time() - grace_seconds
    uploads_dir = root / "uploads"
    if uploads_dir.is_dir():
        known = set(Upload.objects.filter(duplicate_of__isnull=True).values_list("storage_name", flat=True))
        for path in uploads_dir.rglob("*"):
            if path.is_file() and path.stat().st_mtime < cutoff:
                name = path.relative_to(root).as_posix()
                if name not in known:
                    report.problem(f"stray file {name} in the artifact store: no upload row refers to it "
                                   "(a half-stored upload)")
    incoming = root / "incoming"
    if incoming.is_dir():
        for path in incoming.iterdir():
            if path.is_file() and path.stat().st_mtime < cutoff:
                report.warn(f"partial upload incoming/{path.name} left behind ({path.stat().st_size} bytes)")


# --------------------------------------------------------------------------------------------- jobs
def _check_jobs(report: Report, *, project) -> None:
    now = timezone.now()
    timeout = timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS)
    jobs = Job.objects.all() if project is None else Job.objects.filter(project=project)
    for job in jobs.filter(state=JobState.RUNNING).only("pk", "kind", "heartbeat_at", "started_at", "attempts"):
        report.counts["running_jobs"] += 1
        last = job.heartbeat_at or job.started_at
        if last is None or now - last > timeout:
            silence = "never" if last is None else f"{int((now - last).total_seconds())} s ago"
            report.problem(f"job {job.pk} ({job.kind}) is running but its worker last reported {silence} "
                           f"(heartbeat timeout {int(timeout.total_seconds())} s): stuck")
    for job in jobs.filter(state=JobState.QUEUED, started_at__isnull=True, created_at__lt=now - timeout).only("pk", "kind", "created_at"):
        report.problem(f"job {job.pk} ({job.kind}) queued {int((now - job.created_at).total_seconds())} s ago and "
                       "never started (is the broker reachable, a worker consuming its queue, and does its task claim the "
                       "job before anything can fail?)")
    for job in jobs.filter(state=JobState.FAILED, error="").only("pk", "kind"):
        report.problem(f"job {job.pk} ({job.kind}) failed without a reason")
    checkers = {"validate_upload": _validated, "certify_upload": _certified, "fidelity_audit": _audited,
                "run_kernel_submission": _conformance_ran, "calibrate_contracts": _calibrated}
    for job in jobs.filter(state=JobState.SUCCEEDED).order_by("pk").iterator(chunk_size=500):
        report.counts["succeeded_jobs"] += 1
        checker = checkers.get(job.kind)
        if checker is not None:
            checker(report, job)
    _leftovers_of_failed_jobs(report, jobs)


def _upload_of(report: Report, job: Job):
    from audit_portal.runs.models import Upload

    upload = Upload.objects.filter(pk=job.subject_id).first()
    if upload is None:
        report.problem(f"job {job.pk} ({job.kind}) succeeded but its upload {job.subject_id} is gone")
    return upload


def _result_of(report: Report, job: Job, model, verb: str, noun: str, counter: str):
    """(upload, the upload's result row) for a succeeded job; a missing row is a problem."""
    upload = _upload_of(report, job)
    if upload is None:
        return None, None
    row = model.objects.filter(upload=upload).first()
    if row is None:
        report.problem(f"job {job.pk} {verb} upload {upload.pk} but no {noun} is stored")
    else:
        report.counts[counter] += 1
    return upload, row


def _validated(report: Report, job: Job) -> None:
    upload = _upload_of(report, job)
    if upload is not None and upload.stage not in ("valid", "invalid"):
        report.problem(f"job {job.pk} validated upload {upload.pk} but the upload is still {upload.stage}")


def _certified(report: Report, job: Job) -> None:
    from audit_portal.certificates.models import RunCertificate

    upload, cert = _result_of(report, job, RunCertificate, "certified", "certificate", "certificates")
    if cert is None:
        return
    if cert.state != RunCertificate.State.COMPLETE:
        report.problem(f"certificate {cert.pk} of upload {upload.pk} is {cert.state} although job {job.pk} succeeded")
    if (job.result or {}).get("certificate") not in (None, cert.pk):
        report.problem(f"job {job.pk} names certificate {job.result.get('certificate')} but upload {upload.pk} "
                       f"holds certificate {cert.pk}")
    _rows_per_line(report, f"certificate {cert.pk}", cert.sequence_summaries, cert.sequences, "sequence summaries",
                   "certified")
    if cert.steps.values("step").annotate(n=Count("id")).filter(n__gt=1).exists():
        report.problem(f"certificate {cert.pk}: a step has more than one aggregate (duplicate results)")


def _audited(report: Report, job: Job) -> None:
    from audit_portal.fidelity.models import FidelityReport
    from audit_portal.runs.services import artifact_path

    upload, fr = _result_of(report, job, FidelityReport, "audited", "fidelity report", "fidelity_reports")
    if fr is None:
        return
    if fr.state != FidelityReport.State.COMPLETE or fr.verdict not in ("PASS", "FAIL"):
        report.problem(f"fidelity report {fr.pk} of upload {upload.pk} is {fr.state} with verdict {fr.verdict!r} "
                       f"although job {job.pk} succeeded")
    _rows_per_line(report, f"fidelity report {fr.pk}", fr.calls, fr.calls_total, "call rows", "audited")
    for fmt, info in ((fr.mask_export or {}).get("files") or {}).items():
        if not artifact_path(info.get("storage_name", "")).is_file():
            report.problem(f"fidelity report {fr.pk}: loss-mask export ({fmt}) {info.get('storage_name')} is missing")


def _rows_per_line(report: Report, owner: str, rows, expected: int, noun: str, verb: str) -> None:
    """One stored row per input line, as many as the engine reported: nothing lost, nothing stored twice."""
    stored = rows.count()
    if stored != expected:
        report.problem(f"{owner}: {stored} {noun} stored, {expected} {verb}")
    dupes = rows.values("line").annotate(n=Count("id")).filter(n__gt=1).count()
    if dupes:
        report.problem(f"{owner}: {dupes} line(s) have more than one of its {noun} (duplicate results)")


def _conformance_ran(report: Report, job: Job) -> None:
    from audit_portal.kernels.models import Submission

    submission = Submission.objects.filter(job=job).first()
    if submission is None:
        report.problem(f"job {job.pk} ran a kernel submission that no longer exists")
        return
    report.counts["kernel_submissions"] += 1
    stored = submission.verdicts.count()
    if stored != len(submission.plan):
        report.problem(f"submission {submission.pk}: {stored} verdicts stored, {len(submission.plan)} planned "
                       f"(job {job.pk} succeeded)")
    if not submission.grade or submission.finished_at is None:
        report.problem(f"submission {submission.pk}: no grade stored although job {job.pk} succeeded")


def _calibrated(report: Report, job: Job) -> None:
    from audit_portal.kernels.models import ContractCalibration

    pending = ContractCalibration.objects.filter(job=job, status__in=["queued", "running"]).count()
    if pending:
        report.problem(f"job {job.pk} succeeded but {pending} of its calibrations are still pending")


def _leftovers_of_failed_jobs(report: Report, jobs) -> None:
    from audit_portal.certificates.models import RunCertificate

    pending = RunCertificate.objects.filter(state=RunCertificate.State.PENDING)
    active = set(jobs.filter(kind="certify_upload", state__in=[JobState.QUEUED, JobState.RUNNING])
                 .values_list("subject_id", flat=True))
    for cert in pending.only("pk", "upload_id"):
        if cert.upload_id not in active:
            report.warn(f"certificate {cert.pk} of upload {cert.upload_id} is a partial (pending) leftover of a "
                        "failed or cancelled job; it is not shown and a new job replaces it")


# ------------------------------------------------------------------------------------ transparency log
def _find_verify_log():
    for suffix in VERIFY_LOG_MODULES:
        try:
            module = importlib.import_module(ATTESTATIONS_APP + suffix)
        except ImportError:
            continue
        fn = getattr(module, "verify_log", None)
        if callable(fn):
            return fn
    return None


def _check_transparency_log(report: Report) -> None:
    if not apps.is_installed(ATTESTATIONS_APP):
        report.counts["transparency_log"] = 0
        return
    verify_log = _find_verify_log()
    if verify_log is None:
        report.problem("the attestations app is installed but exposes no verify_log()")
        return
    try:
        outcome = verify_log()
    except Exception as exc:  # noqa: BLE001 - a log that cannot be verified is a problem, reported with its reason
        report.problem(f"transparency log does not verify: {type(exc).__name__}: {exc}")
        return
    report.counts["transparency_log"] = 1
    for message in _log_problems(outcome):
        report.problem(f"transparency log: {message}")
    for message in getattr(outcome, "warnings", None) or []:  # e.g. a witness that lags the log
        report.warn(f"transparency log: {message}")


def _log_problems(outcome) -> list[str]:
    """verify_log() may answer True/False, a list of problems, an object or a dict with ``ok``/``problems``."""
    if outcome is None or outcome is True:
        return []
    if outcome is False:
        return ["verify_log() returned False"]
    if isinstance(outcome, (list, tuple)):
        return [str(p) for p in outcome]
    if isinstance(outcome, dict):
        ok, problems = outcome.get("ok", outcome.get("valid")), outcome.get("problems") or outcome.get("errors") or []
    else:
        ok = getattr(outcome, "ok", getattr(outcome, "valid", None))
        problems = getattr(outcome, "problems", None) or getattr(outcome, "errors", None) or []
    problems = [str(p) for p in problems]
    if ok is False and not problems:
        problems = [f"verify_log() reported failure: {outcome!r}"[:500]]
    return problems
