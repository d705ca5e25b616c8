"""Writes for jobs: create and enqueue (by task name, after commit), state transitions, progress.

State machine: queued → running → succeeded | failed | cancelled. Transitions are done under a row lock
so a redelivered task (acks late) cannot run a finished job twice.
"""

from __future__ import annotations

import logging
import socket
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from audit_portal.celery import app as celery_app
from audit_portal.core.errors import QueueUnavailable
from audit_portal.jobs.events import publish_job
from audit_portal.jobs.models import TERMINAL_STATES, Job, JobState

log = logging.getLogger(__name__)


def create_job(
    *,
    project,
    kind: str,
    task_name: str,
    queue: str = "cpu",
    title: str = "",
    params=None,
    subject_kind: str = "",
    subject_id=None,
    submitted_by: str = "",
    enqueue: bool = True,
    after: Job | None = None,
) -> Job:
    """Create a queued job and send its task by name once the surrounding transaction commits; with ``after`` (a
    job not yet ended), only when that job ends (:func:`release_waiting`)."""
    with transaction.atomic():
        # under the other job's row lock, as its end takes it (_finish, cancel_job): it either ended before this job
        # exists (send now) or ends after this transaction commits, when release_waiting sees this job
        waits = after is not None and Job.objects.select_for_update().get(pk=after.pk).state not in TERMINAL_STATES
        job = Job.objects.create(
            project=project,
            kind=kind,
            task_name=task_name,
            queue=queue,
            title=title[:200],
            params=params or {},
            subject_kind=subject_kind,
            subject_id=subject_id,
            submitted_by=submitted_by[:150],
            message=f"waits for {after.title or after.kind} to finish" if waits else waiting_for(queue),
            after=after if waits else None,
        )
        if enqueue and not waits:
            transaction.on_commit(lambda: enqueue_job(job.pk))
    publish_job(job)
    return job


# After a failed connection to the broker, sends fail fast for this long instead of each waiting out the client's
# own retries (redis-py 8 spends ~5 s on a refused connection): during an outage a web process answers 503 at once
# instead of tying up its request threads, and tries the broker again when the pause is over.
BROKER_RETRY_PAUSE_SECONDS = 5.0
_broker_down_until: dict[str, float] = {}


def waiting_for(queue: str) -> str:
    """What a queued job waits for, in words (a bare "queued" hid the 13-22 minutes a kernel submission once spent
    behind the startup calibration): a free worker that takes its queue. Starting the job replaces it."""
    return f"waiting for a free worker that takes the {queue} queue"


def reset_broker_pause() -> None:
    _broker_down_until.clear()


def enqueue_job(job_id: int) -> None:
    """Send the job's task. If the broker is unreachable the job stays queued (the reaper resends it later)
    and :class:`QueueUnavailable` is raised so an API caller gets a 503 with a clear code."""
    job = Job.objects.get(pk=job_id)
    broker = str(celery_app.conf.broker_url)
    try:
        if time.monotonic() < _broker_down_until.get(broker, 0.0):
            raise ConnectionError("broker unreachable moments ago; not retried yet")
        celery_app.send_task(job.task_name, args=[job.pk], queue=job.queue, retry=False)
    except Exception as exc:  # kombu raises several connection error types
        if isinstance(exc, KombuOperationalError):
            _broker_down_until[broker] = time.monotonic() + BROKER_RETRY_PAUSE_SECONDS
        log.error("could not enqueue job %s: %s", job.pk, exc)
        Job.objects.filter(pk=job.pk).update(message="waiting for the queue: broker unreachable")
        raise QueueUnavailable() from exc
    _broker_down_until.pop(broker, None)


def release_waiting(job: Job) -> None:
    """Send the tasks of the queued jobs waiting for ``job`` (which has just ended), once its end commits. A send
    that fails leaves the job queued for the reaper, as any send does."""

    def send():
        for waiting in Job.objects.filter(after=job, state=JobState.QUEUED).order_by("pk"):
            waiting.message = waiting_for(waiting.queue)
            Job.objects.filter(pk=waiting.pk).update(message=waiting.message)
            publish_job(waiting)
            _try_enqueue(waiting.pk)

    transaction.on_commit(send)


def start_job(job_id: int) -> Job | None:
    """Claim a job for this worker. Returns None when it must not run (finished, cancelled, or claimed by
    a live worker) — which makes every task idempotent under redelivery."""
    now = timezone.now()
    stale_before = now - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS)
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.state in TERMINAL_STATES:
            return None
        if job.state == JobState.RUNNING and job.heartbeat_at and job.heartbeat_at > stale_before:
            return None
        job.state = JobState.RUNNING
        job.attempts += 1
        job.started_at = job.started_at or now
        job.heartbeat_at = now
        job.worker = socket.gethostname()[:200]
        job.error = ""
        job.message = "started" if job.attempts == 1 else f"started (attempt {job.attempts})"
        job.save()
    publish_job(job)
    return job


def report_progress(job: Job, fraction: float | None, message: str = "") -> None:
    now = timezone.now()
    if fraction is not None:
        job.progress = max(0.0, min(1.0, float(fraction)))
    if message:
        job.message = message[:500]
    job.heartbeat_at = now
    updated = Job.objects.filter(pk=job.pk, state=JobState.RUNNING).update(
        progress=job.progress, message=job.message, heartbeat_at=now, updated_at=now
    )
    if updated:
        job.updated_at = now
        publish_job(job)


def is_cancelled(job: Job) -> bool:
    return Job.objects.filter(pk=job.pk, state=JobState.CANCELLED).exists()


def finish_job(job: Job, result: dict | None = None, message: str = "done") -> None:
    _finish(job, JobState.SUCCEEDED, message=message, result=result or {})


def fail_job(job: Job, error: str) -> None:
    _finish(job, JobState.FAILED, message="failed", error=error)


def _finish(job: Job, state: str, *, message: str, result: dict | None = None, error: str = "") -> None:
    now = timezone.now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state in TERMINAL_STATES:
            return
        locked.state = state
        locked.message = message[:500]
        locked.error = error
        if result is not None:
            locked.result = result
        if state == JobState.SUCCEEDED:
            locked.progress = 1.0
        locked.finished_at = now
        locked.heartbeat_at = now
        locked.save()
        release_waiting(locked)
    publish_job(locked)


def cancel_job(job: Job) -> bool:
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.state in TERMINAL_STATES:
            return False
        locked.state = JobState.CANCELLED
        locked.message = "cancelled"
        locked.finished_at = timezone.now()
        locked.save()
        release_waiting(locked)
    publish_job(locked)
    return True


def reap_stale_jobs(now=None) -> dict:
    """Never "running" forever: a running job without a heartbeat for JOB_HEARTBEAT_TIMEOUT_SECONDS is
    re-enqueued while it has attempts left, otherwise failed with the reason. Queued jobs left untouched for as
    long (their message may be lost) are resent, at most once per timeout."""
    now = now or timezone.now()
    stale_before = now - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS)
    requeued, failed, resent = [], [], []
    for job in Job.objects.filter(state=JobState.RUNNING, heartbeat_at__lt=stale_before):
        with transaction.atomic():
            locked = Job.objects.select_for_update().get(pk=job.pk)
            if locked.state != JobState.RUNNING or (locked.heartbeat_at and locked.heartbeat_at >= stale_before):
                continue
            silence = int((now - locked.heartbeat_at).total_seconds()) if locked.heartbeat_at else None
            if locked.attempts < settings.JOB_MAX_ATTEMPTS:
                locked.state = JobState.QUEUED
                locked.message = f"worker lost (no heartbeat for {silence} s); retrying"
                locked.save()
                requeued.append(locked.pk)
            else:
                locked.state = JobState.FAILED
                locked.error = (
                    f"worker lost: no heartbeat for {silence} s on attempt {locked.attempts} of "
                    f"{settings.JOB_MAX_ATTEMPTS}; giving up"
                )
                locked.message = "failed"
                locked.finished_at = now
                locked.save()
                failed.append(locked.pk)
        publish_job(locked)
    for job_id in requeued:
        _try_enqueue(job_id)
    # A queued job untouched for a whole timeout may have lost its message (broker down when it was sent, or a
    # broker restarted without persistence). Resend it, and mark it, so each waiting job is resent at most once per
    # timeout: a long backlog behind busy workers must not gain a copy of every waiting job at every tick.
    # A job waiting for another that has not ended is not lost: it is sent when that one ends (release_waiting).
    untouched = (
        Job.objects.filter(state=JobState.QUEUED, updated_at__lt=stale_before)
        .exclude(pk__in=requeued)
        .exclude(after__state__in=[JobState.QUEUED, JobState.RUNNING])
    )
    for job_id in untouched.order_by("pk").values_list("pk", flat=True):
        if _try_enqueue(job_id):
            Job.objects.filter(pk=job_id, state=JobState.QUEUED).update(
                updated_at=now, message="sent to the queue again (no worker had started it)"
            )
            resent.append(job_id)
    return {"requeued": requeued, "failed": failed, "resent": resent}


def _try_enqueue(job_id: int) -> bool:
    try:
        enqueue_job(job_id)
        return True
    except QueueUnavailable:
        return False
