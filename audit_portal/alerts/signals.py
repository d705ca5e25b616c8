"""A certificate that completes queues the run's follow-up (pipelines/alerts.py: merge into the run's live view,
evaluate the project's alert rules). A receiver rather than a call in the certify task: certificates are completed
by more than one path (one pass, chunks merged), and the follow-up runs as its own task so that its failure can never
fail the certificate's job."""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver

from audit_portal import task_names
from audit_portal.alerts.services import send_task
from audit_portal.certificates.models import RunCertificate

log = logging.getLogger(__name__)


def send_follow_up(certificate_id: int) -> None:
    failure = send_task(task_names.RUN_CERTIFICATE_COMPLETED, {"certificate_id": certificate_id})
    if failure is not None:  # alerts lag until the run's next certificate (a segment's: until the sweep); it stands
        log.error("could not queue the follow-up of certificate %s: %s", certificate_id, failure)


@receiver(post_save, sender=RunCertificate, dispatch_uid="audit_portal.alerts.certificate_completed")
def certificate_completed(sender, instance: RunCertificate, **kwargs) -> None:
    if instance.state == RunCertificate.State.COMPLETE and instance.run_id is not None:
        transaction.on_commit(lambda pk=instance.pk: send_follow_up(pk))
