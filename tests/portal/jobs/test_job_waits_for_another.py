"""A job queued behind another (jobs/services.create_job's ``after``): its task is sent only when that job ends —
succeeded, failed or cancelled — and the reaper neither loses it nor sends it early. A large upload's whole-file
audits wait so for its certification, whose pieces then have every worker (issue 26)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit_portal.celery import app as celery_app
from audit_portal.jobs import services
from audit_portal.jobs.models import Job, JobState

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    out = []
    monkeypatch.setattr(celery_app, "send_task", lambda name, args=None, **options: out.append(args[0]))
    return out


def make(project, **kw):
    return services.create_job(project=project, kind=kw.pop("kind", "test"), task_name="workers.tasks.nothing", **kw)


def end(job, how):
    if how == "finish":
        services.finish_job(job, {})
    elif how == "fail":
        services.fail_job(job, "broken")
    else:
        assert services.cancel_job(job)


@pytest.mark.parametrize("how", ["finish", "fail", "cancel"])
def test_a_waiting_job_is_sent_when_the_other_ends_however_it_ends(
    project, sent, django_capture_on_commit_callbacks, how
):
    with django_capture_on_commit_callbacks(execute=True):
        first = make(project, title="Certify upload: big.jsonl")
        waiting = make(project, after=first)
    assert sent == [first.pk]  # only the first: the other waits
    assert waiting.after_id == first.pk and waiting.message == "waits for Certify upload: big.jsonl to finish"
    with django_capture_on_commit_callbacks(execute=True):
        end(first, how)
    assert sent == [first.pk, waiting.pk]
    waiting.refresh_from_db()
    assert waiting.state == JobState.QUEUED and waiting.message.startswith("waiting for a free worker")


def test_behind_a_job_that_has_ended_it_is_sent_at_once(project, sent, django_capture_on_commit_callbacks):
    first = make(project, enqueue=False)
    services.finish_job(first, {})
    with django_capture_on_commit_callbacks(execute=True):
        late = make(project, after=first)
    assert sent == [late.pk] and late.after_id is None


def test_the_reaper_leaves_a_waiting_job_alone_until_the_other_ends(project, sent, settings):
    first = make(project, enqueue=False)
    waiting = make(project, after=first)
    later = timezone.now() + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS + 5)
    assert services.reap_stale_jobs(now=later)["resent"] == [first.pk]  # the first was lost; the second waits
    # the end's own send was lost (e.g. the broker was down): the reaper sends it after a timeout, as any queued job
    Job.objects.filter(pk=first.pk).update(state=JobState.SUCCEEDED)
    assert services.reap_stale_jobs(now=later)["resent"] == [waiting.pk]
    assert sent == [first.pk, waiting.pk]


@pytest.mark.parametrize(
    "size,compression,waits",
    [(10_000, "none", True), (500, "none", False), (10_000, "gzip", False)],
)
def test_a_large_uploads_audits_wait_for_its_certification(project, settings, size, compression, waits):
    from audit_portal.runs import services as runs
    from audit_portal.runs.models import Upload

    settings.CERTIFY_CHUNK_BYTES = 1000  # certification cut into pieces above this (plain JSONL or Parquet)
    upload = Upload.objects.create(
        project=project, original_name="run.jsonl", sha256="0" * 64, size_bytes=size, compression=compression
    )
    runs.record_validation(upload, {"valid": True, "runs": ["r1"], "records_with_routes": 3})
    jobs = {j.kind: j for j in Job.objects.filter(subject_kind="upload", subject_id=upload.pk)}
    assert set(jobs) == {"certify_upload", "fidelity_audit", "routing_audit"}
    assert jobs["certify_upload"].after_id is None
    for kind in ("fidelity_audit", "routing_audit"):
        assert (jobs[kind].after_id == jobs["certify_upload"].pk) is waits, kind
