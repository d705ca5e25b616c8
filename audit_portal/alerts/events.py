"""Alert events to the pages over the channel layer: group ``run.<id>`` (the run page, which also carries the run's
live progress) and ``alerts.<project id>`` (the alerts page). Never raises (audit_portal/core/broadcast.py): the
event row is the truth."""

from __future__ import annotations

from audit_portal.core.broadcast import publish


def run_group(run_id: int) -> str:
    return f"run.{run_id}"


def alerts_group(project_id: int) -> str:
    return f"alerts.{project_id}"


def event_json(event) -> dict:
    return {
        "id": event.pk,
        "kind": event.kind,
        "rule": event.rule_id,
        "rule_name": event.rule.name,
        "rule_kind": event.rule.kind,
        "run": event.run_id,
        "run_name": event.run.name,
        "value": event.value,
        "message": event.message,
        "created_at": event.created_at.isoformat(),
    }


def publish_alert(event) -> None:
    publish(
        {"type": "alert.event", "alert": event_json(event)},
        run_group(event.run_id),
        alerts_group(event.rule.project_id),
    )
