"""One upload validated in pieces (issue #18 part 2, "the same for validation"), in process: the piece tasks the
planner sends are captured and run by hand — reversed, one delivered twice, some lost with their worker — and the
upload's stored summary must equal validate_file's for the same file, its follow-ups queued once. On real worker
processes: tests/portal/pipelines/test_certify_chunks_workers.py (its uploads are validated in pieces too)."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from django.utils import timezone

from audit_portal.jobs.models import Job
from audit_portal.jobs.services import reap_stale_jobs
from audit_portal.runs import services as runs
from audit_portal.runs.models import Upload, ValidationPiece
from workers.fcr.validate import validate_file
from pipelines import uploads as upload_tasks
from pipelines import validate_upload

from ..conftest import as_file, records, upload_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch, settings):
    """The piece tasks the planner sends, captured instead of queued; pieces of about 3 kB."""
    settings.VALIDATE_CHUNK_BYTES = 3000
    calls: list = []
    monkeypatch.setattr(upload_tasks.validate_chunk, "apply_async", lambda args, queue=None: calls.append(list(args)))
    return calls


def upload(api, project, lines: list[bytes]):
    response = api.post(
        upload_url(project), {"file": as_file(b"\n".join(lines) + b"\n", "r.jsonl")}, format="multipart"
    )
    assert response.status_code == 201, response.content
    up = Upload.objects.get(pk=response.json()["id"])
    return up, Job.objects.get(subject_id=up.pk, kind="validate_upload")


def one_pass(up):
    return validate_file(runs.artifact_path(up.storage_name), max_errors=20)


def test_pieces_in_any_order_and_delivered_twice_equal_one_pass(api, project, sent):
    recs = records(trajectories=8)
    lines = [orjson.dumps(r) for r in recs] + [orjson.dumps(recs[0])]  # a duplicate call in the last piece
    up, job = upload(api, project, lines)
    assert validate_upload(job.pk) == "dispatched"
    n = len(sent)
    assert n >= 3 and sorted(a[1]["index"] for a in sent) == list(range(n))
    job.refresh_from_db()
    assert job.state == "running" and job.message == f"0 of {n} pieces validated"
    order = sent[::-1]
    order.insert(1, order[0])  # the first piece's message delivered twice
    for args in order:
        upload_tasks.validate_chunk(*args)
    job.refresh_from_db()
    up.refresh_from_db()
    assert job.state == "succeeded" and job.result["pieces"] == n == ValidationPiece.objects.filter(job=job).count()
    assert up.stage == "valid" and up.validation == one_pass(up)
    assert up.validation["duplicate_call_ids"] == 1
    follow_ups = Job.objects.filter(subject_id=up.pk).exclude(kind="validate_upload")
    assert sorted(follow_ups.values_list("kind", flat=True)) == ["certify_upload", "fidelity_audit"]  # once each


def routed(rec, layers):
    rec = {**rec, "model": {**rec["model"], "served_name": "moe"}, "rollout": dict(rec["rollout"])}
    rec["rollout"]["routed_experts"] = [[[1, 2]] * layers for _ in rec["response"]["token_ids"]]
    return rec


def test_a_file_level_error_across_pieces_is_found_as_one_pass_finds_it(api, project, sent):
    """A model's layer count changes between the first and the last piece: each record passes the upload's
    per-record pre-flight, the file does not pass validation."""
    recs = records(trajectories=8)
    lines = (
        [orjson.dumps(routed(recs[0], 2))] + [orjson.dumps(r) for r in recs[1:]] + [orjson.dumps(routed(recs[1], 3))]
    )
    up, job = upload(api, project, lines)
    validate_upload(job.pk)
    assert len(sent) >= 3
    for args in sent:
        upload_tasks.validate_chunk(*args)
    up.refresh_from_db()
    assert up.stage == "invalid" and up.validation == one_pass(up) and up.error_count == 1
    assert "had 2 at line 1" in up.validation["errors"][0]["reason"]
    assert not Job.objects.filter(subject_id=up.pk).exclude(kind="validate_upload").exists()


def test_a_job_whose_workers_were_lost_sends_only_the_missing_pieces(api, project, sent, settings):
    up, job = upload(api, project, [orjson.dumps(r) for r in records(trajectories=8)])
    validate_upload(job.pk)
    first = list(sent)
    for args in first[:2]:
        upload_tasks.validate_chunk(*args)
    # every other piece's worker died: no heartbeat for longer than the timeout, the reaper sends the job again
    stale = timezone.now() - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS + 5)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=stale)
    assert reap_stale_jobs()["requeued"] == [job.pk]
    sent.clear()
    assert validate_upload(job.pk) == "dispatched"
    assert sorted(a[1]["index"] for a in sent) == list(range(2, len(first)))  # only what was not stored
    for args in first[2:] + sent:  # the lost worker's messages arrive late as well: stored once all the same
        upload_tasks.validate_chunk(*args)
    job.refresh_from_db()
    up.refresh_from_db()
    assert job.state == "succeeded" and job.attempts == 2, job.error
    assert up.stage == "valid" and up.validation == one_pass(up)
    assert ValidationPiece.objects.filter(job=job).count() == len(first)
