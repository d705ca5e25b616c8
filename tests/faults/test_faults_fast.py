"""Faults that can be provoked in-process, fast: the broker down, the disk full, the database failing mid-upload,
the same upload twice at once, a worker lost mid-certification. Each ends with ``check_consistency``.

The same faults against real processes (a killed Celery worker, a restarted private PostgreSQL, a stopped
private Redis, a full loop-mounted filesystem) are scripted in ``bench/faults.py``.
"""

import errno
import hashlib
import threading
from datetime import timedelta
from io import StringIO

import kombu.pools
import pytest
from django.core.management import call_command
from django.db import OperationalError, connection
from django.utils import timezone
from rest_framework.test import APIClient

from audit_portal import task_names
from audit_portal.celery import app
from audit_portal.certificates.models import RunCertificate, SequenceSummary
from audit_portal.jobs import services as job_services
from audit_portal.jobs.models import Job, JobState
from audit_portal.runs import services as run_services
from audit_portal.runs.models import Upload
from portal.conftest import as_file, gz, jsonl, records, stored_files, upload_url

pytestmark = pytest.mark.django_db(transaction=True)


def assert_consistent():
    out = StringIO()
    call_command("check_consistency", "--grace", "0", stdout=out)  # raises CommandError on any problem
    assert "consistent" in out.getvalue()


def use_broker(url: str) -> None:
    app.conf.broker_url = url
    app._pool = None
    app.amqp._producer_pool = None
    kombu.pools.reset()
    job_services.reset_broker_pause()


@pytest.fixture
def broker_down():
    use_broker("redis://127.0.0.1:1/0")  # nothing listens on port 1: connection refused
    yield
    use_broker("memory://")


def test_broker_down_upload_is_503_with_a_clear_code_reads_work_and_the_work_resumes(
    api, project, broker_down, monkeypatch, settings
):
    monkeypatch.setattr(job_services, "BROKER_RETRY_PAUSE_SECONDS", 600.0)  # however slow this machine is today
    data = jsonl(records())
    response = api.post(upload_url(project), {"file": as_file(data)}, format="multipart")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "queue_unavailable" and error["detail"]["stored"] is True
    upload = Upload.objects.get(pk=error["detail"]["upload"])  # stored whole, validation queued
    job = Job.objects.get(subject_kind="upload", subject_id=upload.pk)
    assert job.state == JobState.QUEUED and "broker unreachable" in job.message

    # further work fails fast while the broker is down: no new connection attempt (each costs the client ~5 s)
    attempts = []
    monkeypatch.setattr(job_services.celery_app, "send_task", lambda *a, **k: attempts.append(a))
    second = api.post(upload_url(project), {"file": as_file(jsonl(records(seed=2)))}, format="multipart")
    assert second.status_code == 503 and second.json()["error"]["code"] == "queue_unavailable"
    assert attempts == []
    # reads keep working
    listing = api.get(upload_url(project))
    assert listing.status_code == 200 and len(listing.json()["results"]) == 2
    assert api.get(f"/api/v1/jobs/{job.pk}/").json()["state"] == "queued"
    # resubmitting the same bytes returns the stored upload
    again = api.post(upload_url(project), {"file": as_file(data, "again.jsonl")}, format="multipart")
    assert again.status_code == 200 and again.json()["id"] == upload.pk

    # the broker comes back: the reaper resends every job that was never picked up, nothing is lost
    use_broker("memory://")
    sent = []
    monkeypatch.setattr(job_services.celery_app, "send_task", lambda name, args, queue, retry: sent.append(args[0]))
    later = timezone.now() + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS + 1)
    resent = job_services.reap_stale_jobs(now=later)["resent"]
    assert sorted(resent) == sorted(sent) == sorted(Job.objects.filter(state="queued").values_list("pk", flat=True))
    assert job.pk in sent and len(sent) == 2
    assert_consistent()


class FullDisk:
    """``open`` for the upload handler whose files take ``room`` bytes, then fail with ENOSPC like a full disk."""

    def __init__(self, room: int):
        self.room = room

    def __call__(self, path, mode="r", *args, **kwargs):
        fh = open(path, mode, *args, **kwargs)
        if "w" not in mode:
            return fh
        disk = self

        class Limited:
            def write(self, data):
                if len(data) > disk.room:
                    fh.write(data[: disk.room])
                    disk.room = 0
                    raise OSError(errno.ENOSPC, "No space left on device")
                disk.room -= len(data)
                return fh.write(data)

            def __getattr__(self, name):
                return getattr(fh, name)

        return Limited()


def test_disk_full_refuses_the_upload_cleanly_and_keeps_earlier_ones(api, project, settings, monkeypatch):
    from audit_portal.runs import upload_handler

    earlier = api.post(upload_url(project), {"file": as_file(jsonl(records(seed=3)))}, format="multipart")
    assert earlier.status_code == 201
    before = {p: p.read_bytes() for p in stored_files(settings)}

    big = gz(jsonl(records(trajectories=60, seed=4)))
    monkeypatch.setattr(upload_handler, "open", FullDisk(room=len(big) // 3), raising=False)
    response = api.post(upload_url(project), {"file": as_file(big, "big.jsonl.gz")}, format="multipart")
    assert response.status_code == 507 and response.json()["error"]["code"] == "storage_full"
    assert Upload.objects.count() == 1 and Job.objects.count() == 1  # nothing new recorded
    assert {p: p.read_bytes() for p in stored_files(settings)} == before  # no partial file, earlier one intact
    assert_consistent()

    monkeypatch.undo()  # space freed: the same upload now goes through
    retry = api.post(upload_url(project), {"file": as_file(big, "big.jsonl.gz")}, format="multipart")
    assert retry.status_code == 201 and retry.json()["sha256"] == hashlib.sha256(big).hexdigest()
    assert_consistent()


def test_database_failure_mid_upload_is_a_clear_503_and_leaves_no_file(api, project, settings, monkeypatch):
    real_create = Upload.objects.create

    def failing_create(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(Upload.objects, "create", failing_create)
    response = api.post(upload_url(project), {"file": as_file(jsonl(records(seed=5)))}, format="multipart")
    assert response.status_code == 503 and response.json()["error"]["code"] == "database_unavailable"
    assert Upload.objects.count() == 0 and stored_files(settings) == []  # no half-stored upload
    monkeypatch.setattr(Upload.objects, "create", real_create)
    assert (
        api.post(upload_url(project), {"file": as_file(jsonl(records(seed=5)))}, format="multipart").status_code == 201
    )
    assert_consistent()


def test_a_file_already_stored_for_another_project_survives_a_failed_upload(
    api, project, other_project, settings, monkeypatch
):
    data = jsonl(records(seed=6))
    assert api.post(upload_url(project), {"file": as_file(data)}, format="multipart").status_code == 201
    [stored] = stored_files(settings)

    def failing_create(**kwargs):
        raise OperationalError("connection lost")

    monkeypatch.setattr(Upload.objects, "create", failing_create)
    from audit_portal.runs.upload_handler import hashed_file_from_path, incoming_dir

    part = incoming_dir() / "same.part"
    part.write_bytes(data)
    with pytest.raises(OperationalError):
        run_services.receive_upload(project=other_project, uploaded=hashed_file_from_path(part), submitted_by="t")
    assert stored.read_bytes() == data  # the digest's file is shared: kept for the first project
    assert not part.exists()


@pytest.mark.parametrize("copies", [2, 4])
def test_the_same_upload_submitted_concurrently_gives_one_result(project, submit_token, settings, monkeypatch, copies):
    data = gz(jsonl(records(seed=7)))
    barrier = threading.Barrier(copies, timeout=20)
    real_preflight = run_services.preflight

    def preflight_then_meet(uploaded):
        result = real_preflight(uploaded)
        barrier.wait()  # every request has its file hashed and checked: all race for the insert together
        return result

    monkeypatch.setattr(run_services, "preflight", preflight_then_meet)
    statuses, ids, errors = [], [], []

    def submit():
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {submit_token}")
            r = client.post(upload_url(project), {"file": as_file(data, "r.jsonl.gz")}, format="multipart")
            statuses.append(r.status_code)
            ids.append(r.json().get("id"))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(copies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert sorted(statuses) == [200] * (copies - 1) + [201]
    assert len(set(ids)) == 1
    assert Upload.objects.filter(duplicate_of__isnull=True).count() == 1
    assert Upload.objects.filter(duplicate_of__isnull=False).count() == copies - 1
    assert Job.objects.filter(kind="validate_upload").count() == 1
    assert len(stored_files(settings)) == 1
    assert_consistent()


def test_a_certification_whose_worker_died_is_retried_without_duplicate_rows(api, project, settings):
    from pipelines import certify_upload, validate_upload

    response = api.post(
        upload_url(project), {"file": as_file(gz(jsonl(records(trajectories=8))), "r.jsonl.gz")}, format="multipart"
    )
    upload = Upload.objects.get(pk=response.json()["id"])
    validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk)
    job = Job.objects.get(subject_id=upload.pk, kind="certify_upload")

    # attempt 1 dies after writing part of its rows: simulate by running it, then putting it back mid-flight
    assert certify_upload(job.pk) == "succeeded"
    cert = RunCertificate.objects.get(upload=upload)
    expected = cert.sequences
    RunCertificate.objects.filter(pk=cert.pk).update(state="pending", completed_at=None)
    SequenceSummary.objects.filter(certificate=cert, line__gt=cert.sequence_summaries.order_by("line")[2].line).delete()
    stale = timezone.now() - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS + 5)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, heartbeat_at=stale, finished_at=None, attempts=1)

    # the reaper notices the silent worker and requeues; a redelivery of the lost message is refused meanwhile
    assert job.pk in job_services.reap_stale_jobs()["requeued"]
    assert certify_upload(job.pk) == "succeeded"  # attempt 2 replaces the partial certificate
    job.refresh_from_db()
    assert job.state == "succeeded" and job.attempts == 2
    assert certify_upload(job.pk) == "skipped"  # a late redelivery of attempt 1's message does nothing
    [cert] = RunCertificate.objects.filter(upload=upload)
    assert cert.state == "complete" and cert.sequence_summaries.count() == cert.sequences == expected
    assert_consistent()


def test_a_waiting_job_is_resent_at_most_once_per_timeout(project, settings, monkeypatch):
    """A backlog behind busy workers must not gain a copy of every waiting job at every reaper tick."""
    job = job_services.create_job(
        project=project, kind="validate_upload", task_name=task_names.VALIDATE_UPLOAD, enqueue=False
    )
    sent = []
    monkeypatch.setattr(job_services.celery_app, "send_task", lambda name, args, queue, retry: sent.append(args[0]))
    timeout = timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS)
    assert job_services.reap_stale_jobs()["resent"] == []  # just queued: nothing to resend
    tick = timezone.now() + timeout + timedelta(seconds=1)
    assert job_services.reap_stale_jobs(now=tick)["resent"] == [job.pk]
    for minute in range(1, 5):  # the next ticks inside the same timeout send nothing
        assert job_services.reap_stale_jobs(now=tick + timeout * minute / 5)["resent"] == []
    assert job_services.reap_stale_jobs(now=tick + timeout + timedelta(seconds=1))["resent"] == [job.pk]
    assert sent == [job.pk, job.pk]
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and "sent to the queue again" in job.message


def test_a_task_that_crashes_before_claiming_its_job_fails_the_job_with_the_reason(project, monkeypatch):
    """e.g. the engine does not import: without this the job would stay queued, resent and crashing for ever."""
    import sys
    import types

    from pipelines import certify_upload

    job = job_services.create_job(
        project=project,
        kind="certify_upload",
        task_name=task_names.CERTIFY_UPLOAD,
        subject_kind="upload",
        subject_id=1,
        enqueue=False,
    )
    monkeypatch.setitem(sys.modules, "workers.certify", types.ModuleType("workers.certify"))  # no certify_file
    result = certify_upload.apply(args=[job.pk])
    assert result.failed()
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "crashed before it could start: ImportError" in job.error


def test_a_database_error_before_the_claim_leaves_the_job_for_the_reaper(project):
    from celery.signals import task_failure

    from pipelines import certify_upload

    job = job_services.create_job(
        project=project, kind="certify_upload", task_name=task_names.CERTIFY_UPLOAD, enqueue=False
    )
    task_failure.send(
        sender=certify_upload,
        task_id="t",
        exception=OperationalError("database restarting"),
        args=[job.pk],
        kwargs={},
        traceback=None,
        einfo=None,
    )
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    task_failure.send(
        sender=certify_upload,
        task_id="t",
        exception=ValueError("boom"),
        args=[job.pk],
        kwargs={},
        traceback=None,
        einfo=None,
    )
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "ValueError: boom" in job.error
