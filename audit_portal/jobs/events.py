"""Publishing job events to websocket subscribers through the channel layer.

Groups: ``job.<id>`` (the job page) and ``project.<id>`` (the project feed). Publishing never raises
(audit_portal/core/broadcast.py).
"""

from __future__ import annotations

from audit_portal.core.broadcast import publish


def job_group(job_id: int) -> str:
    return f"job.{job_id}"


def project_group(project_id: int) -> str:
    return f"project.{project_id}"


def publish_job(job) -> None:
    publish({"type": "job.event", "job": job.as_event()}, job_group(job.pk), project_group(job.project_id))
