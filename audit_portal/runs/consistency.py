"""The runs app's consistency checks (registered with :mod:`audit_portal.jobs.consistency`): every upload has its
file with the recorded size and digest, duplicates point at the same bytes, a pending upload has a live validation
job and a valid one its follow-up jobs, no stray or half-stored file sits in the store; and the helpers the apps
that store results per upload use to find a succeeded job's upload and result row."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from audit_portal.core.storage import artifact_path
from audit_portal.jobs.consistency import Report, Scope, register, register_job_check
from audit_portal.jobs.models import Job, JobState
from audit_portal.runs.models import Upload, UploadSession, UploadStage
from audit_portal.runs.services import _storage_name, follow_ups_for
from workers.verify.bundle import file_sha256


@register
def check_uploads(report: Report, scope: Scope) -> None:
    uploads = scope.scoped(Upload.objects.all())
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
        elif scope.rehash:
            report.counts["bytes_rehashed"] += size
            actual = file_sha256(path)
            if actual != up.sha256:
                report.problem(f"{label}: SHA-256 of the stored file is {actual[:16]}…, {up.sha256[:16]}… recorded")
        if up.storage_name != _storage_name(up.sha256, up.compression, up.format):  # .parquet too
            report.problem(f"{label}: storage name {up.storage_name} does not match its digest")
    for dup in uploads.filter(duplicate_of__isnull=False).select_related("duplicate_of").iterator(chunk_size=500):
        report.counts["duplicate_uploads"] += 1
        if dup.duplicate_of.sha256 != dup.sha256:
            report.problem(
                f"upload {dup.pk} is recorded as a duplicate of upload {dup.duplicate_of_id} but their digests differ"
            )
        if dup.stage != UploadStage.DUPLICATE:
            report.problem(f"upload {dup.pk} has duplicate_of set but stage {dup.stage}")
    _check_upload_jobs(report, uploads, scope)


def _check_upload_jobs(report: Report, uploads, scope: Scope) -> None:
    """Exactly one original per (project, digest) is a database constraint; pending stages must be moving."""
    jobs_by_upload: dict[int, dict[str, Job]] = {}
    upload_jobs = scope.scoped(Job.objects.filter(subject_kind="upload"))
    for job in upload_jobs.order_by("created_at", "pk").only("pk", "kind", "state", "subject_id"):
        jobs_by_upload.setdefault(job.subject_id, {})[job.kind] = job  # latest of each kind wins
    for up in uploads.filter(duplicate_of__isnull=True).only("pk", "stage", "original_name").iterator(chunk_size=500):
        jobs = jobs_by_upload.get(up.pk, {})
        validate = jobs.get("validate_upload")
        if up.stage in (UploadStage.RECEIVED, UploadStage.PROCESSING):
            if validate is None:
                report.problem(f"upload {up.pk} is {up.stage} but has no validation job")
            elif validate.state in (JobState.FAILED, JobState.CANCELLED, JobState.SUCCEEDED):
                report.problem(
                    f"upload {up.pk} is still {up.stage} although its validation job {validate.pk} is {validate.state}"
                )
        elif up.stage == UploadStage.VALID:
            for kind, _task, _queue in follow_ups_for(up.validation):
                if kind not in jobs:
                    report.problem(f"upload {up.pk} is valid but its {kind} job was never created")


@register
def check_stray_files(report: Report, scope: Scope) -> None:
    """Files in the store that no row accounts for: a half-stored upload, or a partial one never cleaned up."""
    if scope.project is not None:
        return  # the store is shared between projects: only a whole-portal check can call a file stray
    root = Path(settings.ARTIFACT_ROOT)
    cutoff = time.time() - scope.grace_seconds
    uploads_dir = root / "uploads"
    if uploads_dir.is_dir():
        known = set(Upload.objects.filter(duplicate_of__isnull=True).values_list("storage_name", flat=True))
        for path in uploads_dir.rglob("*"):
            if path.is_file() and path.stat().st_mtime < cutoff:
                name = path.relative_to(root).as_posix()
                if name not in known:
                    report.problem(
                        f"stray file {name} in the artifact store: no upload row refers to it (a half-stored upload)"
                    )
    incoming = root / "incoming"
    if incoming.is_dir():
        # an open resumable upload's file (audit_portal/runs/chunked.py) is expected there until its last part;
        # one untouched for a week is reported as abandoned
        recent = timezone.now() - timedelta(days=7)
        open_sessions = {
            f"session-{pk.hex}.part": at
            for pk, at in UploadSession.objects.filter(state=UploadSession.State.OPEN).values_list("pk", "updated_at")
        }
        for path in incoming.iterdir():
            if path.is_file() and path.stat().st_mtime < cutoff:
                at = open_sessions.get(path.name)
                if at is None:
                    report.warn(f"partial upload incoming/{path.name} left behind ({path.stat().st_size} bytes)")
                elif at < recent:
                    report.warn(
                        f"upload session incoming/{path.name} untouched since {at:%Y-%m-%d} "
                        f"({path.stat().st_size} bytes allocated): abandoned?"
                    )


@register_job_check("validate_upload")
def check_validated(report: Report, job: Job) -> None:
    upload = upload_of(report, job)
    if upload is not None and upload.stage not in ("valid", "invalid"):
        report.problem(f"job {job.pk} validated upload {upload.pk} but the upload is still {upload.stage}")


def upload_of(report: Report, job: Job):
    upload = Upload.objects.filter(pk=job.subject_id).first()
    if upload is None:
        report.problem(f"job {job.pk} ({job.kind}) succeeded but its upload {job.subject_id} is gone")
    return upload


def result_of(report: Report, job: Job, model, verb: str, noun: str, counter: str):
    """(upload, the upload's result row) for a succeeded job; a missing row is a problem."""
    upload = upload_of(report, job)
    if upload is None:
        return None, None
    row = model.objects.filter(upload=upload).first()
    if row is None:
        report.problem(f"job {job.pk} {verb} upload {upload.pk} but no {noun} is stored")
    else:
        report.counts[counter] += 1
    return upload, row
