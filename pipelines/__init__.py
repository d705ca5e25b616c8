"""The orchestration tier: the Celery tasks of every workflow, one module per workflow (docs/architecture.md).

Each task is thin: it loads its inputs, calls an engine (``workers.*``), stores results through one service function
of the portal and reports progress. The web tier sends these by name only (it never imports this package); each task
is registered under its name in ``audit_portal.task_names``, which still reads ``workers.tasks.<function>`` so that
jobs and messages queued before the move keep running.
"""

from pipelines.alerts import deliver_alert_webhook, sweep_alerts
from pipelines.certificates import certify_upload
from pipelines.fidelity import fidelity_audit
from pipelines.kernels import calibrate_contracts, run_kernel_submission, sign_kernel_submission
from pipelines.live import evaluate_alert_rules, run_certificate_completed
from pipelines.maintenance import check_transparency_log, reap_stale_jobs
from pipelines.routing import routing_audit
from pipelines.training import training_step_audit
from pipelines.uploads import validate_upload

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
