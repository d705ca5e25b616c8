"""End to end through a real Celery worker (in-process, solo pool): upload → task sent by name after
commit → worker validates → upload valid, job succeeded."""

import time

import pytest
from celery.contrib.testing.worker import start_worker

from audit_portal.celery import app
from audit_portal.jobs.models import Job
from audit_portal.runs.models import Upload

from ..conftest import as_file, gz, jsonl, records, upload_url

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_upload_is_validated_by_a_real_worker(api, project):
    import pipelines  # noqa: F401 - registers the tasks with the app, as `celery -A` would

    with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=10):
        response = api.post(
            upload_url(project), {"file": as_file(gz(jsonl(records())), "r.jsonl.gz")}, format="multipart"
        )
        assert response.status_code == 201
        upload_id = response.json()["id"]
        job = Job.objects.get(subject_kind="upload", subject_id=upload_id)
        assert wait_for(lambda: Job.objects.get(pk=job.pk).is_terminal), Job.objects.get(pk=job.pk).as_event()
        # the follow-ups (certificate, fidelity audit) it queued must finish before the database is flushed
        assert wait_for(
            lambda: all(j.is_terminal for j in Job.objects.filter(subject_kind="upload", subject_id=upload_id)),
            timeout=120,
        )
    job.refresh_from_db()
    assert job.state == "succeeded" and job.attempts == 1
    assert Upload.objects.get(pk=upload_id).stage == "valid"
    detail = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert detail["state"] == "succeeded" and detail["progress"] == 1.0
