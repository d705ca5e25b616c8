"""The Celery application shared by the web tier (which only *sends* tasks, by name) and the workers.

Queues: ``cpu`` (validation, certificates, fidelity, CPU conformance) and ``gpu`` (training-step audits,
CUDA conformance). The web process never imports ``pipelines`` (the tasks, which pull in torch): it sends them by
their names in ``audit_portal.task_names``.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "audit_portal.settings")

app = Celery("audit_portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
