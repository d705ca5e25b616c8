"""Alert tasks: thin. ``deliver_alert_webhook`` posts one fired event to its rule's webhook, retrying with doubling
waits (the rules are evaluated by workers/tasks/live.py after every completed certificate of a run).

Keyword arguments only: jobs/signals.py reads a positional int of a failed ``workers.tasks.*`` task as
a Job id."""
import logging

from celery import shared_task

from audit_portal.alerts import services

log = logging.getLogger(__name__)


@shared_task(name="workers.tasks.deliver_alert_webhook", bind=True, acks_late=True, max_retries=None)
def deliver_alert_webhook(self, delivery_id: int | None = None) -> str:
    verdict, delay = services.attempt(delivery_id)
    if verdict == "retry":  # the attempt count lives on the row; Celery's retry only schedules the next one
        raise self.retry(countdown=delay)
    return verdict
