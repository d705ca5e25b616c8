"""The name of every Celery task, declared once (docs/architecture.md#task-names-one-module-stable-on-the-wire).

The tasks live in ``pipelines/`` (the tier above the portal); the portal enqueues them by these names and never
imports ``pipelines`` (its tasks pull in torch). ``pipelines`` registers each task under the constant named here, so
the web tier and the workers cannot spell a name two ways.

The names keep the ``workers.tasks.`` prefix the tasks had before they moved to ``pipelines/``: a name is stored on
every job row (the reaper resends ``Job.task_name``), sits in queued broker messages and in the beat schedule, so
renaming it would strand work queued by the previous release. ``tests/portal/pipelines/test_task_names.py`` checks that each
name ends in its function's name and that every name here is registered by the worker app.
"""

from __future__ import annotations

PREFIX = "workers.tasks."  # jobs/signals.py: a failed task under this prefix may be an unclaimed job's

# uploads (pipelines/uploads.py)
VALIDATE_UPLOAD = PREFIX + "validate_upload"
VALIDATE_CHUNK = PREFIX + "validate_chunk"
# certificates (pipelines/certificates.py)
CERTIFY_UPLOAD = PREFIX + "certify_upload"
CERTIFY_CHUNK = PREFIX + "certify_chunk"
# audits of an upload (pipelines/fidelity.py, pipelines/routing.py)
FIDELITY_AUDIT = PREFIX + "fidelity_audit"
ROUTING_AUDIT = PREFIX + "routing_audit"
# training-step audits (pipelines/training.py)
TRAINING_STEP_AUDIT = PREFIX + "training_step_audit"
# kernel submissions (pipelines/kernels.py)
RUN_KERNEL_SUBMISSION = PREFIX + "run_kernel_submission"
CALIBRATE_CONTRACTS = PREFIX + "calibrate_contracts"
SIGN_KERNEL_SUBMISSION = PREFIX + "sign_kernel_submission"
# live runs and alert rules (pipelines/live.py)
RUN_CERTIFICATE_COMPLETED = PREFIX + "run_certificate_completed"
EVALUATE_ALERT_RULES = PREFIX + "evaluate_alert_rules"
# alert deliveries (pipelines/alerts.py)
DELIVER_ALERT_WEBHOOK = PREFIX + "deliver_alert_webhook"
SWEEP_ALERTS = PREFIX + "sweep_alerts"
# periodic upkeep (pipelines/maintenance.py)
REAP_STALE_JOBS = PREFIX + "reap_stale_jobs"
CHECK_TRANSPARENCY_LOG = PREFIX + "check_transparency_log"

ALL = tuple(value for key, value in sorted(globals().items()) if key.isupper() and key not in ("PREFIX", "ALL"))
