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

from audit_portal import task_names
from audit_portal.jobs.execution import piece_stored, run_job, run_job_piece, send_pieces
from audit_portal.runs import services as runs
from audit_portal.runs.models import Upload
from workers.fcr.validate import validate_file


@shared_task(name=task_names.VALIDATE_UPLOAD, acks_late=True)
def validate_upload(job_id: int) -> str:
    """Stream-validate an uploaded run log; a valid upload joins its run and queues its follow-ups."""

    def work(job, progress):
        upload = runs.begin_processing(job.subject_id)
        path = runs.artifact_path(upload.storage_name)
        pieces = _pieces(path)
        if len(pieces) > 1:
            return _dispatch(job, pieces, progress)
        progress(0.0, f"validating {upload.original_name}", force=True)
        summary = validate_file(
            path, max_errors=settings.UPLOAD_VALIDATION_MAX_ERRORS, progress=lambda f, m: progress(f, m)
        )
        return _record(upload, summary)

    return run_job(job_id, work)


@shared_task(name=task_names.VALIDATE_CHUNK, acks_late=True)
def validate_chunk(job_id: int, chunk: dict, n_chunks: int) -> str:
    """Validate one piece of a job's upload and store it once; the task that stores the last piece merges."""
    from workers.fcr.validate_pieces import validate_piece

    def work(job, progress):
        index = chunk["index"]
        if index not in runs.validation_pieces_done(job):
            upload = Upload.objects.get(pk=job.subject_id)
            result = validate_piece(
                runs.artifact_path(upload.storage_name), chunk, max_errors=settings.UPLOAD_VALIDATION_MAX_ERRORS
            )
            runs.store_validation_piece(job, index, result, worker=f"{socket.gethostname()} pid {os.getpid()}")
        piece_stored(
            job,
            len(runs.validation_pieces_done(job)),
            n_chunks,
            progress,
            "pieces validated",
            lambda locked: _merge(locked, n_chunks),
        )

    return run_job_piece(job_id, work)


def _pieces(path):
    """The pieces of a file larger than VALIDATE_CHUNK_BYTES (0 = never cut), else one."""
    from workers.fcr.chunks import chunk_ranges

    limit = settings.VALIDATE_CHUNK_BYTES
    if not limit or path.stat().st_size <= limit:
        return [None]
    return chunk_ranges(path, limit)


def _dispatch(job, pieces, progress):
    """A task per piece without a stored result (jobs.execution.send_pieces)."""
    n = len(pieces)

    def send(piece):
        validate_chunk.apply_async(args=[job.pk, piece.to_dict(), n], queue=job.queue)

    return send_pieces(
        job,
        pieces,
        runs.validation_pieces_done(job),
        send,
        progress,
        "pieces validated",
        lambda locked: _merge(locked, n),
    )


def _merge(job, n_chunks) -> dict:
    """The stored pieces merged into the one-pass summary and recorded: the job's result."""
    from workers.fcr.validate_pieces import merge_pieces

    upload = Upload.objects.select_related("project").get(pk=job.subject_id)
    summary = merge_pieces(
        runs.stored_validation_pieces(job),
        path=runs.artifact_path(upload.storage_name),
        max_errors=settings.UPLOAD_VALIDATION_MAX_ERRORS,
    )
    return {**_record(upload, summary), "pieces": n_chunks}


def _record(upload, summary) -> dict:
    upload = runs.record_validation(upload, summary)
    summary = upload.validation  # as recorded: the log's run parameters checked too
    return {
        "upload": upload.pk,
        "stage": upload.stage,
        "records": summary.get("records"),
        "error_count": summary.get("error_count"),
        "errors": summary.get("errors", [])[:5],
    }
