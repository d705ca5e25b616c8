"""Alert tasks: thin. ``deliver_alert_webhook`` posts one fired event to its rule's webhook, retrying with doubling
waits (the rules are evaluated by pipelines/live.py after every completed certificate of a run).

Keyword arguments only: jobs/signals.py reads a positional int of a failed ``audit_portal.task_names`` task as
a Job id."""

import logging

from celery import shared_task

from audit_portal import task_names
from audit_portal.alerts import services

log = logging.getLogger(__name__)


@shared_task(name=task_names.DELIVER_ALERT_WEBHOOK, bind=True, acks_late=True, max_retries=None)
def deliver_alert_webhook(self, delivery_id: int | None = None) -> str:
    verdict, delay = services.attempt(delivery_id)
    if verdict == "retry":  # the attempt count lives on the row; Celery's retry only schedules the next one
        raise self.retry(countdown=delay)
    return verdict


@shared_task(name=task_names.SWEEP_ALERTS)
def sweep_alerts() -> dict:
    """Every minute (beat): resend what a lost message left behind — webhook deliveries never attempted or overdue,
    and the follow-up of segment certificates that was never run."""
    from audit_portal.alerts.signals import send_follow_up
    from audit_portal.live.services import lost_segments

    certificates = lost_segments()
    for pk in certificates:
        send_follow_up(pk)
    return {"deliveries": services.resend_stale(), "follow_ups": certificates}
