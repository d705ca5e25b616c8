"""Audit Portal web tier. The Celery app is created here so ``@shared_task`` and ``send_task`` find it."""

from audit_portal.celery import app as celery_app

__all__ = ["celery_app"]
