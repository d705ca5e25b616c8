from celery import shared_task

from audit_portal.jobs.services import reap_stale_jobs as reap


@shared_task(name="workers.tasks.reap_stale_jobs")
def reap_stale_jobs() -> dict:
    """Retry or fail jobs whose worker went silent; resend queued jobs never picked up (celery beat, 60 s)."""
    return reap()
