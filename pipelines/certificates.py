"""Certification tasks. A file up to ``CERTIFY_CHUNK_BYTES`` is certified by one task; a larger one is cut into
chunks (workers/fcr/chunks.py: byte ranges at line starts for JSONL, row groups for Parquet; gzip is one piece)
that any ``cpu`` worker certifies (``certify_chunk``), each stored once with its sequence rows
(CertificateChunk, unique per (job, index)); the task that stores the last chunk merges the partial certificates
(workers/certify/partial.py) and finishes the job. The merged certificate is the one-pass certificate, bit for bit.

Failure: a worker killed mid-chunk leaves nothing of that chunk (one transaction); the broker redelivers its task
(acks late, reject on worker lost) or, if the whole worker died, the stale-job reaper re-runs ``certify_upload``,
which sends again only the chunks without a stored result."""

import logging
import os
import socket
import time

from celery import shared_task
from django.conf import settings

from audit_portal import task_names
from audit_portal.certificates import figures as certificate_figures
from audit_portal.certificates import services as certificates
from audit_portal.certificates.models import RunCertificate
from audit_portal.jobs.execution import piece_stored, run_job, run_job_piece, send_pieces
from audit_portal.runs import services as runs
from audit_portal.runs.models import Upload

log = logging.getLogger(__name__)
CERTIFY_OPTIONS = {"threshold", "budget", "mode", "precision", "eta", "constants", "reward_range"}


@shared_task(name=task_names.CERTIFY_UPLOAD, acks_late=True)
def certify_upload(job_id: int) -> str:
    """Certify a valid upload; per-sequence summaries are bulk-inserted chunk by chunk as the engine streams."""
    from workers.certify import certify_file  # torch: imported by workers only

    def work(job, progress):
        upload = Upload.objects.select_related("project", "run").get(pk=job.subject_id)
        options = {k: v for k, v in job.params.items() if k in CERTIFY_OPTIONS}
        path = runs.artifact_path(upload.storage_name)
        chunks = _chunks(path, upload.compression != "none")
        if len(chunks) > 1:
            return _dispatch(job, upload, path, options, chunks, progress)
        certificate = certificates.begin(upload, options)
        histograms = certificates.Histograms()
        result = certify_file(
            path,
            sequence_sink=lambda rows: certificates.add_sequences(certificate, rows, histograms),
            progress=lambda f, m: progress(f, m),
            **options,
        )
        certificate = certificates.complete(certificate, result, histograms)
        progress(1.0, "drawing the run page's figures", force=True)
        _store_figures(certificate)
        return _job_result(certificate, result)

    return run_job(job_id, work)


@shared_task(name=task_names.CERTIFY_CHUNK, acks_late=True)
def certify_chunk(job_id: int, certificate_id: int, plan: dict, chunk: dict, n_chunks: int) -> str:
    """Certify one chunk of a job's upload and store it once; the task that stores the last chunk merges."""
    from workers.certify.file import certify_part

    def work(job, progress):
        certificate = RunCertificate.objects.filter(pk=certificate_id, state=RunCertificate.State.PENDING).first()
        if certificate is None:  # the job was restarted with a fresh certificate: this message is stale
            return
        index = chunk["index"]
        if index not in certificates.chunks_done(job):
            upload = Upload.objects.get(pk=job.subject_id)
            rows: list = []
            part = certify_part(
                runs.artifact_path(upload.storage_name),
                plan,
                chunk,
                sequence_sink=rows.extend,
                progress=lambda f, m: progress(None, f"chunk {index + 1} of {n_chunks}: {m}"),
            )
            certificates.store_chunk(
                job, certificate, index, part.to_json(), rows, worker=f"{socket.gethostname()} pid {os.getpid()}"
            )
        piece_stored(
            job,
            len(certificates.chunks_done(job)),
            n_chunks,
            progress,
            "chunks certified",
            lambda locked: _merge(locked, certificate, plan, n_chunks),
        )

    return run_job_piece(job_id, work)


def _chunks(path, compressed: bool):
    """The pieces of a plain file larger than CERTIFY_CHUNK_BYTES (0 = never cut), else one."""
    from workers.fcr.chunks import chunk_ranges, cut_into_pieces

    limit = settings.CERTIFY_CHUNK_BYTES
    if not cut_into_pieces(path.stat().st_size, compressed, limit):
        return [None]
    return chunk_ranges(path, limit)


def _dispatch(job, upload, path, options, chunks, progress):
    """Plan once, then a task per chunk without a stored result (jobs.execution.send_pieces)."""
    from workers.certify.file import plan_certificate

    plan = plan_certificate(path, **options)  # a budget without a threshold scans the file once, here
    certificate = certificates.begin_chunked(upload, options, job)
    n = len(chunks)

    def send(chunk):
        certify_chunk.apply_async(args=[job.pk, certificate.pk, plan, chunk.to_dict(), n], queue=job.queue)

    return send_pieces(
        job,
        chunks,
        certificates.chunks_done(job),
        send,
        progress,
        "chunks certified",
        lambda locked: _merge(locked, certificate, plan, n),
    )


def _merge(job, certificate, plan, n_chunks) -> dict:
    """The stored partials merged into the certificate, stored, signed and drawn: the job's result."""
    from workers.certify.file import summarise
    from workers.certify.partial import Partial

    t0 = time.monotonic()
    stored = certificates.stored_chunks(job)
    part = Partial.merged(Partial.from_json(c.partial) for c in stored)
    histograms = certificates.Histograms()
    for c in stored:
        histograms.merge(c.histograms)
    result = summarise(part, plan)
    t1 = time.monotonic()
    certificate = certificates.complete(certificate, result, histograms)
    t2 = time.monotonic()
    _store_figures(certificate)
    # the serial tail after the last piece, in the worker log (docs/deploy.md, "Scaling")
    log.info(
        "job %s: %d pieces merged in %.3f s, certificate stored and signed in %.3f s, figures in %.3f s",
        job.pk,
        n_chunks,
        t1 - t0,
        t2 - t1,
        time.monotonic() - t2,
    )
    return {**_job_result(certificate, result), "chunks": n_chunks}


def _store_figures(certificate):
    try:  # the first visit reads them; without them the web builds them on that visit (figures.py)
        certificate_figures.store_page_figures(certificate)
    except Exception:  # the certificate is stored and complete; figures are a convenience
        log.exception("could not store the figures of certificate %s", certificate.pk)


def _job_result(certificate, result):
    s = result["summary"]
    return {
        "certificate": certificate.pk,
        "sequences": s.get("sequences"),
        "tokens": s.get("tokens"),
        "acceptance_rate": s.get("acceptance_rate"),
        "eps_hat": s.get("eps_hat"),
        "best_bound": result["bounds"].get("best"),
        "best_bound_id": result["bounds"].get("argmin"),
        "data_errors": s.get("data_errors"),
        "verdict": certificate.verdict,
        "verdict_label": (certificate.verdict_detail or {}).get("label"),
    }
