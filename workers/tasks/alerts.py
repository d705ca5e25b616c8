"""Alert tasks: thin. ``run_certificate_completed`` follows every completed certificate of a run (queued by
audit_portal/alerts/signals.py): it evaluates the project's alert rules on the run so far.
``deliver_alert_webhook`` posts one fired event to its rule's webhook, retrying with doubling waits.

Both take keyword arguments only: jobs/signals.py reads a positional int of a failed ``workers.tasks.*`` task as
a Job id."""
import logging

from celery import shared_task

from audit_portal.alerts import selectors, services
from audit_portal.certificates.models import RunCertificate

log = logging.getLogger(__name__)


@shared_task(name="workers.tasks.run_certificate_completed", acks_late=True)
def run_certificate_completed(certificate_id: int | None = None) -> str:
    certificate = RunCertificate.objects.select_related("run").filter(
        pk=certificate_id, state=RunCertificate.State.COMPLETE).first()
    if certificate is None or certificate.run is None:
        return "skipped"
    raised = services.evaluate_run(certificate.run, selectors.run_snapshot(certificate.run))
    return f"{len(raised)} alert event(s)"


@shared_task(name="workers.tasks.deliver_alert_webhook", bind=True, acks_late=True, max_retries=None)
def deliver_alert_webhook(self, delivery_id: int | None = None) -> str:
    verdict, delay = services.attempt(delivery_id)
    if verdict == "retry":  # the attempt count lives on the row; Celery's retry only schedules the next one
        raise self.retry(countdown=delay)
    return verdict
