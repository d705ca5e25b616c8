"""Validation of uploads. A file up to ``VALIDATE_CHUNK_BYTES`` is validated by one task; a larger plain-JSONL or
Parquet file is cut into pieces (workers/fcr/chunks.py) that any ``cpu`` worker validates (``validate_chunk``), each
stored once (ValidationPiece, unique per (job, index)); the task that stores the last piece merges them into the
one-pass summary (workers/fcr/validate_pieces.py: duplicate calls and layer counts across pieces) and records it.

Failure: a worker killed mid-piece stores nothing of that piece; the broker redelivers its task (acks late, reject on
worker lost) or, if the whole worker died, the stale-job reaper re-runs ``validate_upload``, which sends again only
the pieces without a stored result."""
import os
import socket

from celery import shared_task
from django.conf import settings
from django.db import transaction

from audit_portal.jobs import services as jobs
from audit_portal.jobs.execution import STILL_RUNNING, run_job, run_job_piece
from audit_portal.jobs.models import Job
from audit_portal.runs import services as runs
from audit_portal.runs.models import Upload
from workers.fcr.validate import validate_file


@shared_task(name="workers.tasks.validate_upload", acks_late=True)
def validate_upload(job_id: int) -> str:
    """Stream-validate an uploaded run log; a valid upload joins its run and queues its follow-ups."""

    def work(job, progress):
        upload = runs.begin_processing(job.subject_id)
        path = runs.artifact_path(upload.storage_name)
        pieces = _pieces(path)
        if len(pieces) > 1:
            return _dispatch(job, pieces, progress)
        progress(0.0, f"validating {upload.original_name}", force=True)
        summary = validate_file(path, max_errors=settings.UPLOAD_VALIDATION_MAX_ERRORS,
                                progress=lambda f, m: progress(f, m))
        return _record(upload, summary)

    return run_job(job_id, work)


@shared_task(name="workers.tasks.validate_chunk", acks_late=True)
def validate_chunk(job_id: int, chunk: dict, n_chunks: int) -> str:
    """Validate one piece of a job's upload and store it once; the task that stores the last piece merges."""
    from workers.fcr.validate_pieces import validate_piece

    def work(job, progress):
        index = chunk["index"]
        if index not in runs.validation_pieces_done(job):
            upload = Upload.objects.get(pk=job.subject_id)
            result = validate_piece(runs.artifact_path(upload.storage_name), chunk,
                                    max_errors=settings.UPLOAD_VALIDATION_MAX_ERRORS)
            runs.store_validation_piece(job, index, result, worker=f"{socket.gethostname()} pid {os.getpid()}")
        done = len(runs.validation_pieces_done(job))
        progress(done / n_chunks * 0.99, f"{done} of {n_chunks} pieces validated", force=True)
        if done == n_chunks:
            _merge_and_finish(job, n_chunks)

    return run_job_piece(job_id, work)


def _pieces(path):
    """The pieces of a file larger than VALIDATE_CHUNK_BYTES (0 = never cut), else one."""
    from workers.fcr.chunks import chunk_ranges

    limit = settings.VALIDATE_CHUNK_BYTES
    if not limit or path.stat().st_size <= limit:
        return [None]
    return chunk_ranges(path, limit)


def _dispatch(job, pieces, progress):
    """Send a task for every piece without a stored result (all of them, or what a lost worker left undone)."""
    done = runs.validation_pieces_done(job)
    n = len(pieces)
    progress(len(done) / n * 0.99, f"{len(done)} of {n} pieces validated", force=True)
    for piece in pieces:
        if piece.index not in done:
            validate_chunk.apply_async(args=[job.pk, piece.to_dict(), n], queue=job.queue)
    if len(done) == n:  # every piece was stored but the merge did not happen (its worker died right after)
        _merge_and_finish(job, n)
    return STILL_RUNNING


def _merge_and_finish(job, n_chunks):
    """Merge the stored pieces and record the summary, once: under the job's row lock, so two tasks that stored the
    last pieces at the same moment do not both record it."""
    from workers.fcr.validate_pieces import merge_pieces

    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.is_terminal:
            return
        upload = Upload.objects.select_related("project").get(pk=locked.subject_id)
        summary = merge_pieces(runs.stored_validation_pieces(locked), path=runs.artifact_path(upload.storage_name),
                               max_errors=settings.UPLOAD_VALIDATION_MAX_ERRORS)
        jobs.finish_job(locked, {**_record(upload, summary), "pieces": n_chunks})


def _record(upload, summary) -> dict:
    upload = runs.record_validation(upload, summary)
    return {"upload": upload.pk, "stage": upload.stage, "records": summary.get("records"),
            "error_count": summary.get("error_count"), "errors": summary.get("errors", [])[:5]}
