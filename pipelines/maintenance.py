from celery import shared_task

from audit_portal import task_names
from audit_portal.alerts.log_integrity import check_and_alert
from audit_portal.jobs.services import reap_stale_jobs as reap
from audit_portal.runs.chunked import expire_idle_sessions


@shared_task(name=task_names.REAP_STALE_JOBS)
def reap_stale_jobs() -> dict:
    """Retry or fail jobs whose worker went silent; resend queued jobs never picked up; delete abandoned upload
    sessions and their stored parts (audit_portal.runs.chunked.expire_idle_sessions) (celery beat, 60 s)."""
    return {**reap(), "expired_upload_sessions": expire_idle_sessions()["expired"]}


@shared_task(name=task_names.CHECK_TRANSPARENCY_LOG)
def check_transparency_log() -> dict:
    """The scheduled log check (celery beat, AUDIT_LOG_CHECK_SECONDS, default 300 s): alert when the log stops
    verifying (audit_portal.alerts.log_integrity)."""
    row = check_and_alert()
    return {"ok": row.ok, "tree_size": row.tree_size, "problems": len(row.problems)}
