"""A task that crashes before it claims its job (an import error in the engine, a bad argument) would leave the job
queued for ever, resent by the reaper and crashing again. The worker fails such a job with the crash as its reason.

Database errors are left alone: the job stays queued and the reaper resends it once the database is back."""

from __future__ import annotations

import logging

from celery.signals import task_failure
from django.db import DatabaseError

from audit_portal import task_names

log = logging.getLogger(__name__)


@task_failure.connect(dispatch_uid="audit_portal.jobs.fail_unclaimed_job")
def fail_unclaimed_job(sender=None, exception=None, args=None, **kwargs) -> None:
    name = getattr(sender, "name", "") or ""
    if not name.startswith(task_names.PREFIX) or not args or not isinstance(args[0], int):
        return
    if isinstance(exception, DatabaseError):
        return
    from audit_portal.jobs import services
    from audit_portal.jobs.models import Job, JobState

    try:
        job = Job.objects.filter(pk=args[0], state=JobState.QUEUED).first()
        if job is not None:
            services.fail_job(job, f"the task crashed before it could start: {type(exception).__name__}: {exception}")
    except DatabaseError as exc:  # the reaper will resend it
        log.warning("could not fail job %s after its task crashed: %s", args[0], exc)
