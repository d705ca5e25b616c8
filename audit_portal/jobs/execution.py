"""Running a job inside a Celery task: claim it, report progress (throttled), finish or fail with a reason.

Tasks stay thin: ``run_job(job_id, work)`` where ``work(job, progress)`` loads inputs, calls an engine and
stores results. An exception from ``work`` fails the job with its message; it never crashes the worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import connection, transaction

from audit_portal.jobs import services
from audit_portal.jobs.models import Job

log = logging.getLogger(__name__)


class JobCancelled(Exception):
    """Raised from a progress callback when a user cancelled the job; the work stops at that point."""


class JobInputError(Exception):
    """A failure caused by the job's input (not a bug): its message is shown to the user as is."""


class ProgressReporter:
    """Callable ``(fraction, message)`` that writes at most every ``min_interval`` seconds."""

    def __init__(self, job: Job, min_interval: float = 0.5, start: float = 0.0, span: float = 1.0):
        self.job = job
        self.min_interval = min_interval
        self.start = start
        self.span = span
        self._last = 0.0

    def __call__(self, fraction: float | None = None, message: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        scaled = None if fraction is None else self.start + self.span * max(0.0, min(1.0, fraction))
        services.report_progress(self.job, scaled, message)
        if services.is_cancelled(self.job):
            raise JobCancelled()

    def stage(self, start: float, span: float) -> "ProgressReporter":
        """A reporter for a sub-stage occupying ``[start, start+span]`` of this job's progress."""
        child = ProgressReporter(self.job, self.min_interval, self.start + self.span * start, self.span * span)
        child._last = self._last
        return child


#: Returned by a ``work`` that handed the job to other tasks (chunks certified by several workers): the job stays
#: running, its pieces report progress (the heartbeat) and the last one finishes it.
STILL_RUNNING = object()


def run_job(job_id: int, work: Callable[[Job, ProgressReporter], dict | None]) -> str:
    job = services.start_job(job_id)
    if job is None:
        if not Job.objects.filter(pk=job_id).exists():
            # not a finished or claimed job of ours: a task sent by another instance sharing this broker (or for a
            # database that was reset). Acknowledged, but said loudly: its sender's job will wait for its reaper.
            log.error(
                "task for job %s, which this worker's database (%s) does not know: another instance may share "
                "this broker; give each its own namespace (AUDIT_INSTANCE, set per checkout by scripts/up)",
                job_id,
                connection.settings_dict.get("NAME"),
            )
            return "unknown_job"
        return "skipped"
    outcome, result = _guarded(job, work)
    if outcome != "ok":
        return outcome
    if result is STILL_RUNNING:
        return "dispatched"
    services.finish_job(job, result or {})
    return "succeeded"


def run_job_piece(job_id: int, work: Callable[[Job, ProgressReporter], dict | None]) -> str:
    """One piece of a job that :func:`run_job` left running (``STILL_RUNNING``): runs only while the job is running
    (not cancelled, failed or finished), without claiming it, since its pieces run at once on several workers. A
    failure fails the whole job with its reason; the piece that completes the job finishes it itself."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.is_terminal:
        return "skipped"
    outcome, _ = _guarded(job, work)
    return "done" if outcome == "ok" else outcome


def _guarded(job: Job, work) -> tuple[str, object]:
    """Run ``work(job, progress)``: ("ok", its result), or ("cancelled" | "failed", None) with the job failed with
    the reason — an exception never crashes the worker."""
    try:
        return "ok", work(job, ProgressReporter(job))
    except JobCancelled:
        return "cancelled", None
    except JobInputError as exc:
        services.fail_job(job, str(exc))
    except Exception as exc:  # report every failure on the job, keep the worker alive
        log.exception("job %s failed", job.pk)
        services.fail_job(job, f"internal error: {type(exc).__name__}: {exc}")
    return "failed", None


def send_pieces(job: Job, pieces, done: set[int], send: Callable, progress, what: str, finish: Callable):
    """A job cut into pieces (certified or validated by several workers): send ``send(piece)`` for every piece
    without a stored result (all of them, or what a lost worker left undone, when the reaper re-runs the job) and
    leave the job running. When every piece is stored already (the worker that stored the last one died before it
    finished the job), ``finish`` at once (:func:`finish_once`)."""
    n = len(pieces)
    progress(len(done) / n * 0.99, f"{len(done)} of {n} {what}", force=True)
    for piece in pieces:
        if piece.index not in done:
            send(piece)
    if len(done) == n:
        finish_once(job, finish)
    return STILL_RUNNING


def piece_stored(job: Job, done: int, n: int, progress, what: str, finish: Callable) -> None:
    """After a piece is stored: progress ``done of n``; the task that stores the last piece finishes the job."""
    progress(done / n * 0.99, f"{done} of {n} {what}", force=True)
    if done == n:
        finish_once(job, finish)


def finish_once(job: Job, finish: Callable[[Job], dict]) -> None:
    """``finish(job)`` (merge the pieces, store the result; returns the job's result) and finish the job, under the
    job's row lock and only while it is not finished: two tasks that stored the last pieces at the same moment do not
    both finish it."""
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        if locked.is_terminal:
            return
        services.finish_job(locked, finish(locked))
