"""Writes for runs and uploads: receiving a file, recording its validation, attaching it to a run."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from audit_portal import task_names
from audit_portal.core.errors import PortalError, QueueUnavailable, UnsupportedUpload
from audit_portal.core.storage import artifact_path  # tasks and tests reach it as runs.artifact_path
from audit_portal.jobs.services import create_job
from audit_portal.runs import declarations
from audit_portal.runs.declarations import apply_to_run, checked_log_params, has_nul, log_params_of
from audit_portal.runs.models import Run, Upload, UploadStage, ValidationPiece
from audit_portal.runs.preflight import PARQUET_MAGIC, preflight
from audit_portal.runs.upload_handler import HashedUploadedFile
from workers.fcr.chunks import cut_into_pieces

log = logging.getLogger(__name__)

PARQUET_FORMAT = "fcr-parquet/1"  # workers/fcr/columnar.py; the web process never reads the rows, only the footer


class InvalidRunLog(PortalError):
    default_code = "invalid_run_log"


def _storage_name(sha256: str, compression: str, fmt: str = "fcr/1") -> str:
    suffix = ".parquet" if fmt == PARQUET_FORMAT else ".jsonl.gz" if compression == "gzip" else ".jsonl"
    return f"uploads/{sha256[:2]}/{sha256}{suffix}"


def receive_upload(
    *, project, uploaded: HashedUploadedFile, submitted_by: str, config=None, tags=None
) -> tuple[Upload, bool]:
    """Store an uploaded run log and queue its validation; ``config``/``tags`` (checked by runs/declarations.py) are
    stored with it and reach its run when it turns valid.

    Returns ``(upload, created)``. The same bytes uploaded again return the first upload with
    ``created=False`` (the resubmission is recorded as a ``duplicate`` row that stores no file).
    A file that fails the pre-flight check raises and leaves nothing behind.
    """
    try:
        check = preflight(uploaded)
        if not check.ok:
            error_cls = UnsupportedUpload if check.code == "unsupported_upload_format" else InvalidRunLog
            raise error_cls(check.message, code=check.code, extra={"errors": check.errors} if check.errors else None)
        original = Upload.objects.filter(project=project, sha256=uploaded.sha256, duplicate_of__isnull=True).first()
        if original is not None:
            return _record_duplicate(project, original, uploaded, submitted_by, config, tags), False
        fmt = PARQUET_FORMAT if uploaded.compression == "none" and uploaded.head[:4] == PARQUET_MAGIC else "fcr/1"
        name = _storage_name(uploaded.sha256, uploaded.compression, fmt)
        target = artifact_path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        uploaded.close()
        existed = target.exists()  # the same bytes may already be stored for another project
        os.replace(uploaded.path, target)  # same filesystem: atomic, no copy
        try:
            with transaction.atomic():
                upload = Upload.objects.create(
                    project=project,
                    original_name=(uploaded.name or "upload.jsonl")[:255],
                    sha256=uploaded.sha256,
                    size_bytes=uploaded.size,
                    content_type=(uploaded.content_type or "")[:100],
                    compression=uploaded.compression,
                    format=fmt,
                    storage_name=name,
                    stage=UploadStage.RECEIVED,
                    submitted_by=submitted_by,
                    config=config or {},
                    tags=tags or [],
                )
                create_job(
                    project=project,
                    kind="validate_upload",
                    task_name=task_names.VALIDATE_UPLOAD,
                    queue="cpu",
                    title=f"Validate {upload.original_name}",
                    subject_kind="upload",
                    subject_id=upload.pk,
                    submitted_by=submitted_by,
                )
        except IntegrityError:
            # A concurrent request stored the same digest first: the file on disk is identical, keep it.
            original = Upload.objects.get(project=project, sha256=uploaded.sha256, duplicate_of__isnull=True)
            return _record_duplicate(project, original, uploaded, submitted_by, config, tags), False
        except QueueUnavailable as exc:
            # Committed before the send failed: the upload and its queued job are stored; the reaper resends it.
            raise QueueUnavailable(
                f"Upload {upload.pk} was stored, but the job queue is not reachable: its validation starts "
                "automatically when the queue is back (submitting the same file again returns this upload).",
                extra={"upload": upload.pk, "stored": True},
            ) from exc
        except DatabaseError:
            # Nothing was committed (e.g. PostgreSQL restarting): take the file back out, leave no half-stored upload.
            if not existed:
                target.unlink(missing_ok=True)
            raise
        return upload, True
    finally:
        uploaded.discard()


@transaction.atomic
def _record_duplicate(
    project, original: Upload, uploaded: HashedUploadedFile, submitted_by: str, config, tags
) -> Upload:
    """The resubmission's row keeps what it was given; its config/tags reach the run now when the first upload has
    joined one already, otherwise when that one turns valid (record_validation reads its resubmissions)."""
    duplicate = Upload.objects.create(
        project=project,
        original_name=(uploaded.name or "upload.jsonl")[:255],
        sha256=uploaded.sha256,
        size_bytes=uploaded.size,
        content_type=(uploaded.content_type or "")[:100],
        compression=uploaded.compression,
        stage=UploadStage.DUPLICATE,
        duplicate_of=original,
        submitted_by=submitted_by,
        processed_at=timezone.now(),
        config=config or {},
        tags=tags or [],
    )
    # read again: the first upload may have turned valid since it was looked up (merging twice changes nothing)
    joined = Upload.objects.filter(pk=original.pk, stage=UploadStage.VALID, run__isnull=False).select_related("run")
    first = joined.first()
    if first is not None:
        apply_to_run(first.run, [duplicate])
    return original


def begin_processing(upload_id: int) -> Upload:
    upload = Upload.objects.select_related("project").get(pk=upload_id)
    if upload.stage != UploadStage.PROCESSING:
        upload.stage = UploadStage.PROCESSING
        upload.save(update_fields=["stage"])
    return upload


def validation_pieces_done(job) -> set[int]:
    return set(ValidationPiece.objects.filter(job=job).values_list("index", flat=True))


def store_validation_piece(job, index: int, result: dict, worker: str = "") -> bool:
    """Store one validated piece; False (nothing written) when it is stored already (a task delivered twice)."""
    try:
        with transaction.atomic():
            ValidationPiece.objects.create(job=job, index=index, result=result, worker=worker[:200])
    except IntegrityError:
        return False
    return True


def stored_validation_pieces(job) -> list[dict]:
    return list(ValidationPiece.objects.filter(job=job).order_by("index").values_list("result", flat=True))


# Follow-up work queued when an upload turns valid: (kind, task name, queue). Later issues add here.
FOLLOW_UPS: list[tuple[str, str, str]] = [
    ("certify_upload", task_names.CERTIFY_UPLOAD, "cpu"),
    ("fidelity_audit", task_names.FIDELITY_AUDIT, "cpu"),
    ("routing_audit", task_names.ROUTING_AUDIT, "cpu"),  # only for logs with MoE routes (docs/routing.md)
]


def _certified_in_pieces(upload: Upload) -> bool:
    """Whether the certification will be cut into pieces (a plain JSONL or Parquet log above CERTIFY_CHUNK_BYTES;
    pipelines/certificates.py). Then the whole-file audits wait for it: queued beside it, one of them would hold a
    worker for the whole file while the pieces queue behind it (docs/deploy.md, "Upload to certificate")."""
    return cut_into_pieces(upload.size_bytes, upload.compression != "none", settings.CERTIFY_CHUNK_BYTES)


def follow_ups_for(summary: dict) -> list[tuple[str, str, str]]:
    """The follow-up jobs a valid upload with this validation summary gets (the routing audit only when its records
    carry MoE routes); the consistency check expects exactly these."""
    return [f for f in FOLLOW_UPS if f[0] != "routing_audit" or (summary or {}).get("records_with_routes")]


@transaction.atomic
def record_validation(upload: Upload, summary: dict) -> Upload:
    """Store the validator's summary (with the run parameters its log declared checked: a bad one makes it
    invalid); a valid upload joins its run, which takes the log's and the upload's config and tags, and its
    follow-up jobs are queued."""
    summary = checked_log_params(summary)
    upload.validation = summary
    upload.error_count = int(summary.get("error_count", 0))
    upload.stage = UploadStage.VALID if summary.get("valid") else UploadStage.INVALID
    upload.processed_at = timezone.now()
    if upload.stage == UploadStage.VALID:
        run_ids = summary.get("runs") or []
        run_name = run_ids[0] if len(run_ids) == 1 else Path(upload.original_name).stem.split(".")[0] or "run"
        upload.run, _ = Run.objects.get_or_create(project=upload.project, name=run_name[:200])
        Run.objects.filter(pk=upload.run.pk).update(updated_at=timezone.now())
        # the log's config/tags (of the run it joins), then the upload's, then those of its resubmissions so far (a
        # later one applies its own)
        log_config, log_tags = log_params_of(summary, upload.run.name)
        apply_to_run(
            upload.run,
            [upload, *upload.resubmissions.order_by("created_at", "id")],
            log_config=log_config,
            log_tags=log_tags,
        )
        certification = None
        for kind, task_name, queue in follow_ups_for(summary):
            job = create_job(
                project=upload.project,
                kind=kind,
                task_name=task_name,
                queue=queue,
                title=f"{kind.replace('_', ' ').capitalize()}: {upload.original_name}",
                subject_kind="upload",
                subject_id=upload.pk,
                submitted_by=upload.submitted_by,
                after=certification if _certified_in_pieces(upload) else None,
            )
            certification = certification or job  # FOLLOW_UPS lists the certification first
    upload.save()
    return upload


RUN_STATES = ("running", "finished", "failed")


def start_run(*, project, name: str, config=None, tags=None) -> tuple[Run, bool]:
    """The run ``name`` of ``project``, created when new (a client starting or resuming it); ``config``/``tags``
    given replace the stored ones. Returns ``(run, created)``; the run is marked running."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or has_nul(name):
        raise PortalError(
            "name: the run's name (its records' run_id), 1 to 200 characters, no U+0000",
            code="invalid_run_name",
            extra={"field": "name"},
        )
    config = declarations.parse_config(config, origin="run")
    tags = declarations.parse_tags(tags, origin="run")
    with transaction.atomic():
        try:
            with transaction.atomic():
                run, created = Run.objects.get_or_create(project=project, name=name)
        except IntegrityError:  # a concurrent start of the same run
            run, created = Run.objects.get(project=project, name=name), False
        run = Run.objects.select_for_update().get(pk=run.pk)
        if config is not None:
            run.config = config
        if tags is not None:
            run.tags = tags
        run.state = "running"
        run.save()
    return run, created


def set_run_state(run: Run, *, state: str, missing_steps=None) -> Run:
    """A client's end of the run (``finished`` or ``failed``), with the steps it could not log (added to those
    recorded before: a resumed run may report its gaps in several processes)."""
    if state not in RUN_STATES:
        raise PortalError(f"state: one of {', '.join(RUN_STATES)}", code="invalid_run_state", extra={"field": "state"})
    if missing_steps is not None and (
        not isinstance(missing_steps, list)
        or len(missing_steps) > 1_000_000
        or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 10**12 for s in missing_steps)
    ):
        raise PortalError(
            "missing_steps: a list of step numbers", code="invalid_missing_steps", extra={"field": "missing_steps"}
        )
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        run.state = state
        if missing_steps:
            run.missing_steps = sorted(set(run.missing_steps) | set(missing_steps))
        run.save()
    return run
