"""One upload certified in chunks by real worker processes as they ship (``scripts/worker general``, issue #18):
two worker processes share the chunks of one run and store the one-pass certificate; a worker's pool process
SIGKILLed while it certifies costs that chunk only (the broker redelivers it: acks late, reject on worker lost) and
the certificate is still exact, every sequence stored once. The uploads are validated in pieces by the same workers
and merged into the one-pass summary. Small file, small chunks (CERTIFY_CHUNK_BYTES, VALIDATE_CHUNK_BYTES)."""

from __future__ import annotations

import os
import re
import signal
from collections import Counter
from pathlib import Path

import orjson
import pytest

from audit_portal import task_names
from audit_portal.certificates.models import CertificateChunk
from audit_portal.jobs.models import Job
from audit_portal.jobs.services import cancel_job
from audit_portal.runs import services as runs
from audit_portal.runs.models import Upload, ValidationPiece
from workers.fcr.synth import SynthConfig, iter_run
from workers.fcr.validate import validate_file

from ..conftest import as_file, upload_url
from ..shipped_workers import shipped_workers, wait_for
from .test_certify_chunks import assert_equals_one_pass

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
CHUNK_BYTES = 100_000


def upload_run(api, project, seed):
    recs = iter_run(SynthConfig(trajectories=20, response_len=(60, 160), top_k=8, seed=seed))
    data = b"".join(orjson.dumps(r) + b"\n" for r in recs)  # ≈ 1.8 MB of plain JSONL: about 18 chunks
    response = api.post(upload_url(project), {"file": as_file(data, "run.jsonl")}, format="multipart")
    assert response.status_code == 201, response.content
    return Upload.objects.get(pk=response.json()["id"])


def certify_job(upload):
    return Job.objects.filter(subject_id=upload.pk, kind="certify_upload").first()


def pool_children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.fixture
def chunked_workers(monkeypatch):
    monkeypatch.setenv("CERTIFY_CHUNK_BYTES", str(CHUNK_BYTES))  # read by the worker processes' settings
    monkeypatch.setenv("VALIDATE_CHUNK_BYTES", str(2 * CHUNK_BYTES))  # the upload is validated in pieces too
    monkeypatch.setenv("WORKER_CONCURRENCY", "1")  # one pool process per worker: "two workers" means two processes


def test_two_worker_processes_store_the_one_pass_certificate(api, project, settings, tmp_path, chunked_workers):
    with shipped_workers(settings, tmp_path, roles=("general", "general")):
        upload = upload_run(api, project, seed=21)
        # the upload's fidelity audit runs on the same queue: cancelled, so that it cannot keep one process busy
        # while the other certifies every piece
        assert wait_for(lambda: Job.objects.filter(subject_id=upload.pk, kind="fidelity_audit").exists(), 300)
        cancel_job(Job.objects.get(subject_id=upload.pk, kind="fidelity_audit"))
        assert wait_for(lambda: certify_job(upload) is not None and certify_job(upload).is_terminal, 300)
    job = certify_job(upload)
    assert job.state == "succeeded", job.as_event()
    chunks = CertificateChunk.objects.filter(job=job)
    assert job.result["chunks"] == chunks.count() >= 6
    workers = list(chunks.values_list("worker", flat=True))
    assert len(set(workers)) == 2, workers  # both processes certified some of them
    assert_equals_one_pass(upload, job)
    validation = Job.objects.get(subject_id=upload.pk, kind="validate_upload")  # validated in pieces, merged
    assert (
        validation.result["pieces"] >= 4
        and ValidationPiece.objects.filter(job=validation).count() == validation.result["pieces"]
    )
    upload.refresh_from_db()
    assert upload.validation == validate_file(runs.artifact_path(upload.storage_name), max_errors=20)


def test_a_worker_killed_mid_chunk_leaves_the_certificate_exact(api, project, settings, tmp_path, chunked_workers):
    with shipped_workers(settings, tmp_path, roles=("general",)) as procs:
        upload = upload_run(api, project, seed=22)
        assert wait_for(lambda: CertificateChunk.objects.filter(certificate__upload=upload).exists(), 300)
        log_path = tmp_path / "general-worker.log"
        for _ in range(3):
            kill_inside_a_chunk(procs[0].pid)
            stored_at_kill = CertificateChunk.objects.filter(certificate__upload=upload).count()
            if "WorkerLostError" in log_path.read_text():
                break
        assert wait_for(lambda: certify_job(upload).is_terminal, 300)
    job = certify_job(upload)
    assert job.state == "succeeded", job.as_event()
    assert stored_at_kill < job.result["chunks"] == CertificateChunk.objects.filter(job=job).count()
    log = log_path.read_text()
    assert "WorkerLostError" in log  # the process died inside a task ...
    received = Counter(re.findall(rf"Task {re.escape(task_names.CERTIFY_CHUNK)}\[([0-9a-f-]+)\] received", log))
    assert max(received.values()) >= 2, received  # ... a chunk's, whose message the broker delivered again
    assert_equals_one_pass(upload, job)


def kill_inside_a_chunk(worker_pid: int) -> None:
    """SIGKILL the worker's pool process while it certifies a chunk.

    A warm process runs a chunk in tens of milliseconds, so a kill aimed at it may land between two tasks: the pool
    then hands the message the process had not yet accepted to its replacement, and no task is lost. So the warm
    process is killed first, whenever; its replacement starts cold and imports the certifier (torch) inside its first
    chunk, which takes seconds, and is killed once it has mapped libtorch: inside that task."""
    assert not has_loaded_torch(worker_pid)  # else a fresh pool process would map libtorch before any task
    [warm] = pool_children(worker_pid)
    os.kill(warm, signal.SIGKILL)
    assert wait_for(lambda: any(pid != warm and has_loaded_torch(pid) for pid in pool_children(worker_pid)), 120), (
        "the replacement pool process took no chunk (were they all certified before the first kill?)"
    )
    [cold] = pool_children(worker_pid)
    os.kill(cold, signal.SIGKILL)


def has_loaded_torch(pid: int) -> bool:
    """Whether a process has mapped libtorch. The worker's main process never imports torch (the tasks import the
    engines when they run), so a pool process forked from it maps libtorch only once it is running a task."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
