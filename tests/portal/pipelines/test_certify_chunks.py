"""One upload certified in chunks (issue #18 part 2), in process: the chunk tasks the planner sends are captured and
run by hand in a hostile order — reversed, one delivered twice, some lost with their worker — and the stored
certificate must equal the one-pass certificate of the same file, with every sequence stored once. The same flow
on real worker processes (two of them, and one SIGKILLed mid-run) is tests/portal/pipelines/test_certify_chunks_workers.py."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from django.utils import timezone

from audit_portal.certificates import services as certificates
from audit_portal.certificates.models import CertificateChunk, RunCertificate, SequenceSummary, StepAggregate
from audit_portal.jobs.models import Job
from audit_portal.jobs.services import reap_stale_jobs
from audit_portal.runs import services as runs
from audit_portal.runs.models import Upload
from workers.certify.file import certify_file
from pipelines import certify_upload, validate_upload
from pipelines import certificates as certificate_tasks

from ..conftest import as_file, jsonl, records, upload_url

pytestmark = pytest.mark.django_db


def upload_plain(api, project, recs):
    """A plain JSONL upload (gzip cannot be cut), validated; returns it and its queued certify job."""
    response = api.post(upload_url(project), {"file": as_file(jsonl(recs), "r.jsonl")}, format="multipart")
    assert response.status_code == 201, response.content
    upload = Upload.objects.get(pk=response.json()["id"])
    validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk)
    return upload, Job.objects.get(subject_id=upload.pk, kind="certify_upload")


def run_records():
    recs = records(trajectories=10)
    policy = next(i for i, r in enumerate(recs) if r["role"] == "policy")
    recs[policy]["trainer"]["logprobs"][0] = 0.5  # a DATA_ERROR sequence: errors must merge too
    return recs


@pytest.fixture
def sent(monkeypatch):
    """The chunk tasks the planner sends, captured instead of queued."""
    calls: list = []
    monkeypatch.setattr(
        certificate_tasks.certify_chunk, "apply_async", lambda args, queue=None: calls.append(list(args))
    )
    return calls


def assert_equals_one_pass(upload, job):
    certificate = RunCertificate.objects.get(upload=upload)
    expected_rows: list = []
    expected = certify_file(runs.artifact_path(upload.storage_name), sequence_sink=expected_rows.extend)
    assert certificate.state == "complete"
    for field in ("summary", "bounds", "errors", "length_buckets", "caveats"):  # jsonb keeps values, not key order
        sort = orjson.OPT_SORT_KEYS
        assert orjson.dumps(getattr(certificate, field), option=sort) == orjson.dumps(expected[field], option=sort)
    keys = ("step", "sequences", "tokens", "accepted", "eps_hat_max", "eps_hat_mean", "mean_k3", "metrics")
    steps = list(StepAggregate.objects.filter(certificate=certificate).order_by("step").values(*keys))
    assert steps == [{k: s[k] for k in keys} for s in expected["steps"]]
    stored = list(
        SequenceSummary.objects.filter(certificate=certificate)
        .order_by("line")
        .values_list("line", "status", "eps_hat")
    )
    assert stored == [(r["line"], r["status"], r["eps_hat"]) for r in expected_rows]  # each sequence once
    with_eps = sum(1 for r in expected_rows if r["eps_hat"] is not None)
    assert sum(certificate.histograms["eps"]["counts"]) == with_eps
    assert Job.objects.get(pk=job.pk).result["certificate"] == certificate.pk


def test_chunks_in_any_order_and_delivered_twice_equal_one_worker(api, project, settings, sent):
    settings.CERTIFY_CHUNK_BYTES = 4000
    upload, job = upload_plain(api, project, run_records())
    assert certify_upload(job.pk) == "dispatched"
    n = len(sent)
    assert n >= 4 and sorted(a[3]["index"] for a in sent) == list(range(n))
    job.refresh_from_db()
    assert job.state == "running" and job.message == f"0 of {n} chunks certified"
    order = sent[::-1]
    order.insert(1, sent[-1])  # the first chunk run is delivered again at once
    for i, args in enumerate(order):
        assert certificate_tasks.certify_chunk(*args) == "done"
        if i == 2:
            job.refresh_from_db()
            assert job.state == "running" and job.message == f"2 of {n} chunks certified"
    job.refresh_from_db()
    assert job.state == "succeeded" and job.result["chunks"] == n, job.error
    assert CertificateChunk.objects.filter(job=job).count() == n
    assert certificate_tasks.certify_chunk(*sent[0]) == "skipped"  # a late duplicate after the end changes nothing
    # two deliveries of one chunk that both computed it (one did not see the other's row): the second store is refused
    certificate = RunCertificate.objects.get(upload=upload)
    rows = SequenceSummary.objects.count()
    assert not certificates.store_chunk(job, certificate, 0, {"tokens": 1}, [{"line": 1, "status": "CERT_IN"}])
    assert SequenceSummary.objects.count() == rows
    assert_equals_one_pass(upload, job)


def test_a_lost_worker_costs_its_chunks_only(api, project, settings, sent):
    settings.CERTIFY_CHUNK_BYTES = 4000
    upload, job = upload_plain(api, project, run_records())
    certify_upload(job.pk)
    first = list(sent)
    for args in first[:2]:
        certificate_tasks.certify_chunk(*args)
    # every other chunk's worker died: no heartbeat for longer than the timeout, the reaper sends the job again
    stale = timezone.now() - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS + 5)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=stale)
    assert reap_stale_jobs()["requeued"] == [job.pk]
    sent.clear()
    assert certify_upload(job.pk) == "dispatched"
    assert sorted(a[3]["index"] for a in sent) == list(range(2, len(first)))  # only what was not stored
    assert sent[0][1] == first[0][1]  # the same certificate: stored chunks are kept
    for args in first[2:] + sent:  # the lost worker's messages arrive late as well: stored once all the same
        certificate_tasks.certify_chunk(*args)
    job.refresh_from_db()
    assert job.state == "succeeded" and job.attempts == 2, job.error
    assert_equals_one_pass(upload, job)


def test_a_small_upload_is_one_task(api, project, settings, sent):
    settings.CERTIFY_CHUNK_BYTES = 10**9
    upload, job = upload_plain(api, project, run_records())
    assert certify_upload(job.pk) == "succeeded" and not sent
    assert not CertificateChunk.objects.exists()
    assert_equals_one_pass(upload, job)
