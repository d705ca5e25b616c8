"""Celery tasks: thin. Each loads its inputs, calls an engine, stores results through one service function,
and reports progress. The web tier sends these by name only (it never imports this package).

One module per domain; every task is registered under ``workers.tasks.<name>``.
"""

from workers.tasks.alerts import deliver_alert_webhook, sweep_alerts
from workers.tasks.certificates import certify_upload
from workers.tasks.fidelity import fidelity_audit
from workers.tasks.kernels import calibrate_contracts, run_kernel_submission, sign_kernel_submission
from workers.tasks.live import evaluate_alert_rules, run_certificate_completed
from workers.tasks.maintenance import check_transparency_log, reap_stale_jobs
from workers.tasks.routing import routing_audit
from workers.tasks.training import training_step_audit
from workers.tasks.uploads import validate_upload

__all__ = [
    "calibrate_contracts",
    "certify_upload",
    "check_transparency_log",
    "deliver_alert_webhook",
    "evaluate_alert_rules",
    "fidelity_audit",
    "reap_stale_jobs",
    "routing_audit",
    "run_certificate_completed",
    "run_kernel_submission",
    "sign_kernel_submission",
    "sweep_alerts",
    "training_step_audit",
    "validate_upload",
]
