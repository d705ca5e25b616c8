"""One upload certified in chunks by real worker processes as they ship (``scripts/worker general``, issue #18):
two worker processes share the chunks of one run and store the one-pass certificate; a worker's pool process
SIGKILLed while it certifies costs that chunk only (the broker redelivers it: acks late, reject on worker lost) and
the certificate is still exact, every sequence stored once. Small file, small chunks (CERTIFY_CHUNK_BYTES)."""
from __future__ import annotations

import os
import re
import signal
from collections import Counter
from pathlib import Path

import orjson
import pytest

from audit_portal.certificates.models import CertificateChunk
from audit_portal.jobs.models import Job
from audit_portal.jobs.services import cancel_job
from audit_portal.runs.models import Upload
from workers.fcr.synth import SynthConfig, iter_run

from .conftest import as_file, upload_url
from .shipped_workers import shipped_workers, wait_for
from .test_certify_chunks import assert_equals_one_pass

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
CHUNK_BYTES = 200_000


def upload_run(api, project, seed):
    recs = iter_run(SynthConfig(trajectories=20, response_len=(60, 160), top_k=8, seed=seed))
    data = b"".join(orjson.dumps(r) + b"\n" for r in recs)  # ≈ 1.8 MB of plain JSONL: about 9 chunks
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


def test_a_worker_killed_mid_chunk_leaves_the_certificate_exact(api, project, settings, tmp_path, chunked_workers):
    with shipped_workers(settings, tmp_path, roles=("general",)) as procs:
        upload = upload_run(api, project, seed=22)
        assert wait_for(lambda: CertificateChunk.objects.filter(certificate__upload=upload).exists(), 300)
        victims = pool_children(procs[0].pid)
        assert len(victims) == 1
        os.kill(victims[0], signal.SIGKILL)  # busy with the next chunk: it runs chunks back to back
        stored_at_kill = CertificateChunk.objects.filter(certificate__upload=upload).count()
        assert wait_for(lambda: certify_job(upload).is_terminal, 300)
    job = certify_job(upload)
    assert job.state == "succeeded", job.as_event()
    assert stored_at_kill < job.result["chunks"] == CertificateChunk.objects.filter(job=job).count()
    log = (tmp_path / "general-worker.log").read_text()
    assert "WorkerLostError" in log  # the process died inside a task ...
    received = Counter(re.findall(r"Task workers\.tasks\.certify_chunk\[([0-9a-f-]+)\] received", log))
    assert max(received.values()) == 2, received  # ... a chunk's, whose message the broker delivered again
    assert_equals_one_pass(upload, job)
