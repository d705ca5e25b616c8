"""Nothing lost: a read-only audit of what the database says against what the artifact store holds.

``check()`` returns problems (the portal's state contradicts itself: a lost file, changed bytes, a finished
job without its results, a job stuck "running" past the heartbeat timeout, a transparency log that does not
verify) and warnings (leftovers that lose nothing, e.g. the partial rows of a failed job). It never writes.
``manage.py check_consistency`` prints them and exits non-zero when there is a problem.

This module knows jobs only. Each app that owns data registers its own checks from its ``consistency`` module
(imported by its ``AppConfig.ready``), the way Django's system checks register: ``@register`` for a check of the
app's rows and files, ``@register_job_check(kind)`` for what a succeeded job of that kind must have left behind.
So ``jobs`` never imports the apps above it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from audit_portal.jobs.models import Job, JobState


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    def problem(self, message: str) -> None:
        self.problems.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {"ok": self.ok, "problems": self.problems, "warnings": self.warnings, "checked": dict(self.counts)}


@dataclass(frozen=True)
class Scope:
    """What one run of the check covers: the whole portal (``project`` None) or one project's rows."""

    project: object = None
    rehash: bool = True  # hash every stored file again (slow for large uploads) rather than compare sizes
    grace_seconds: float = 300.0  # a file younger than this may be an upload between its move and its commit

    def scoped(self, queryset):
        return queryset if self.project is None else queryset.filter(project=self.project)


Check = Callable[[Report, Scope], None]
JobCheck = Callable[[Report, Job], None]
_CHECKS: list[Check] = []
_JOB_CHECKS: dict[str, JobCheck] = {}


def register(check_fn: Check) -> Check:
    """Add a check of an app's own rows and files (run once per ``check()``, in app registration order)."""
    if check_fn not in _CHECKS:
        _CHECKS.append(check_fn)
    return check_fn


def register_job_check(*kinds: str):
    """Decorator: ``fn(report, job)`` runs for every succeeded job of these kinds (one checker per kind)."""

    def decorate(fn: JobCheck) -> JobCheck:
        for kind in kinds:
            _JOB_CHECKS[kind] = fn
        return fn

    return decorate


def check(*, rehash: bool = True, grace_seconds: float = 300.0, project=None) -> Report:
    report, scope = Report(), Scope(project=project, rehash=rehash, grace_seconds=grace_seconds)
    for check_fn in _CHECKS:
        check_fn(report, scope)
    _check_jobs(report, scope)
    return report


def rows_per_line(report: Report, owner: str, rows, expected: int, noun: str, verb: str) -> None:
    """One stored row per input line, as many as the engine reported: nothing lost, nothing stored twice."""
    stored = rows.count()
    if stored != expected:
        report.problem(f"{owner}: {stored} {noun} stored, {expected} {verb}")
    dupes = rows.values("line").annotate(n=Count("id")).filter(n__gt=1).count()
    if dupes:
        report.problem(f"{owner}: {dupes} line(s) have more than one of its {noun} (duplicate results)")


def _check_jobs(report: Report, scope: Scope) -> None:
    now = timezone.now()
    timeout = timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS)
    jobs = scope.scoped(Job.objects.all())
    for job in jobs.filter(state=JobState.RUNNING).only("pk", "kind", "heartbeat_at", "started_at", "attempts"):
        report.counts["running_jobs"] += 1
        last = job.heartbeat_at or job.started_at
        if last is None or now - last > timeout:
            silence = "never" if last is None else f"{int((now - last).total_seconds())} s ago"
            report.problem(
                f"job {job.pk} ({job.kind}) is running but its worker last reported {silence} "
                f"(heartbeat timeout {int(timeout.total_seconds())} s): stuck"
            )
    for job in jobs.filter(state=JobState.QUEUED, started_at__isnull=True, created_at__lt=now - timeout).only(
        "pk", "kind", "created_at"
    ):
        report.problem(
            f"job {job.pk} ({job.kind}) queued {int((now - job.created_at).total_seconds())} s ago and "
            "never started (is the broker reachable, a worker consuming its queue, and does its task claim the "
            "job before anything can fail?)"
        )
    for job in jobs.filter(state=JobState.FAILED, error="").only("pk", "kind"):
        report.problem(f"job {job.pk} ({job.kind}) failed without a reason")
    for job in jobs.filter(state=JobState.SUCCEEDED).order_by("pk").iterator(chunk_size=500):
        report.counts["succeeded_jobs"] += 1
        checker = _JOB_CHECKS.get(job.kind)
        if checker is not None:
            checker(report, job)
