"""Alert events to the pages over the channel layer: group ``run.<id>`` (the run page, which also carries the run's
live progress) and ``alerts.<project id>`` (the alerts page). Never raises: the event row is the truth."""
from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def run_group(run_id: int) -> str:
    return f"run.{run_id}"


def alerts_group(project_id: int) -> str:
    return f"alerts.{project_id}"


def event_json(event) -> dict:
    return {"id": event.pk, "kind": event.kind, "rule": event.rule_id, "rule_name": event.rule.name,
            "rule_kind": event.rule.kind, "run": event.run_id, "run_name": event.run.name, "value": event.value,
            "message": event.message, "created_at": event.created_at.isoformat()}


def publish(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception as exc:  # noqa: BLE001 - a dead channel layer must not fail the evaluation
        log.warning("could not publish to %s: %s", group, exc)


def publish_alert(event) -> None:
    message = {"type": "alert.event", "alert": event_json(event)}
    publish(run_group(event.run_id), message)
    publish(alerts_group(event.rule.project_id), message)
