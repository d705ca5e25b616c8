"""Publishing job events to websocket subscribers through the channel layer.

Groups: ``job.<id>`` (the job page) and ``project.<id>`` (the project feed). Publishing never raises:
live progress is a convenience, the database row is the truth.
"""
from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def job_group(job_id: int) -> str:
    return f"job.{job_id}"


def project_group(project_id: int) -> str:
    return f"project.{project_id}"


def publish_job(job) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "job.event", "job": job.as_event()}
    try:
        async_to_sync(layer.group_send)(job_group(job.pk), message)
        async_to_sync(layer.group_send)(project_group(job.project_id), message)
    except Exception as exc:  # noqa: BLE001 - a dead channel layer must not fail the job
        log.warning("could not publish job %s event: %s", job.pk, exc)
