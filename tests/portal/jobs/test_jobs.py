"""The job state machine: idempotent claims, reasons on failure, never "running" forever."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit_portal.jobs import services
from audit_portal.jobs.execution import JobInputError, run_job
from audit_portal.jobs.models import Job, JobState

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(project):
    return services.create_job(project=project, kind="test", task_name="workers.tasks.nothing", enqueue=False)


def test_run_job_moves_through_the_states_and_keeps_the_result(job):
    seen = []

    def work(j, progress):
        seen.append(Job.objects.get(pk=j.pk).state)
        progress(0.5, "half way", force=True)
        assert Job.objects.get(pk=j.pk).progress == 0.5
        return {"answer": 42}

    assert run_job(job.pk, work) == "succeeded"
    job.refresh_from_db()
    assert seen == [JobState.RUNNING] and job.state == JobState.SUCCEEDED
    assert job.result == {"answer": 42} and job.progress == 1.0 and job.attempts == 1 and job.finished_at


def test_a_queued_job_says_what_it_waits_for_until_it_starts(project, client, owner):
    from audit_portal.jobs.models import Job

    job = services.create_job(
        project=project, kind="kernel_conformance", task_name="workers.tasks.nothing", queue="kernels", enqueue=False
    )
    assert job.message == "waiting for a free worker that takes the kernels queue"
    client.force_login(owner)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-field="message"' in html and "waiting for a free worker that takes the kernels queue" in html
    services.start_job(job.pk)
    assert Job.objects.get(pk=job.pk).message == "started"


def test_a_finished_job_is_not_run_again_on_redelivery(job):
    calls = []
    run_job(job.pk, lambda j, p: calls.append(1))
    assert run_job(job.pk, lambda j, p: calls.append(1)) == "skipped"
    assert calls == [1]


def test_a_job_claimed_by_a_live_worker_is_not_run_twice(job):
    assert services.start_job(job.pk) is not None
    assert services.start_job(job.pk) is None


def test_errors_fail_the_job_with_a_reason_and_do_not_escape(job, project):
    def bad_input(j, p):
        raise JobInputError("line 7: trainer.logprobs has 3 values for 4 tokens")

    assert run_job(job.pk, bad_input) == "failed"
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.error == "line 7: trainer.logprobs has 3 values for 4 tokens"
    other = services.create_job(project=project, kind="test", task_name="x", enqueue=False)
    assert run_job(other.pk, lambda j, p: 1 / 0) == "failed"
    other.refresh_from_db()
    assert "ZeroDivisionError" in other.error


def test_cancelling_stops_the_work_at_its_next_progress_report(job):
    def work(j, progress):
        services.cancel_job(Job.objects.get(pk=j.pk))
        progress(0.3, "still going", force=True)
        raise AssertionError("work continued after cancel")

    assert run_job(job.pk, work) == "cancelled"
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_a_job_whose_worker_died_is_retried_then_failed_with_a_reason(job, settings):
    settings.JOB_MAX_ATTEMPTS = 2
    later = timezone.now() + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS + 5)
    services.start_job(job.pk)  # the worker claims it, then dies silently
    outcome = services.reap_stale_jobs(now=later)
    job.refresh_from_db()
    assert outcome["requeued"] == [job.pk] and job.state == JobState.QUEUED and "worker lost" in job.message
    services.start_job(job.pk)  # second attempt dies too
    outcome = services.reap_stale_jobs(now=later + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS + 5))
    job.refresh_from_db()
    assert outcome["failed"] == [job.pk] and job.state == JobState.FAILED
    assert "worker lost" in job.error and "attempt 2 of 2" in job.error


def test_a_running_job_with_a_fresh_heartbeat_is_left_alone(job):
    services.start_job(job.pk)
    assert services.reap_stale_jobs() == {"requeued": [], "failed": [], "resent": []}
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_enqueue_failure_is_a_503_style_error_and_the_job_stays_queued(job, monkeypatch):
    from audit_portal.core.errors import QueueUnavailable
    from audit_portal.jobs import services as svc

    def broken(*a, **k):
        raise ConnectionError("redis down")

    monkeypatch.setattr(svc.celery_app, "send_task", broken)
    with pytest.raises(QueueUnavailable):
        svc.enqueue_job(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and "broker unreachable" in job.message
