"""What the run-verdict issue's "Done when" has present while its pages are judged: three kernel submissions (two of
one kernel, so that the submissions list offers a diff), a finished training audit and an alert rule. The runs come
from ``synthetic_runs`` (tests/portal/dashboards/test_runs_table_browser.py) or real uploads, as each test needs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class World:
    submissions: list
    training_audit: object
    alert_rule: object


def kernels_training_and_an_alert(project) -> World:
    from django.utils import timezone

    from audit_portal.alerts import services as alert_services
    from audit_portal.kernels import services as kernel_services
    from audit_portal.training.models import TrainingAudit

    from .kernels.test_kernels_contract_pages import shipped_contracts
    from .kernels.test_kernels_results import ALL_PASS, make_submission

    kernel_services.store_contracts(shipped_contracts())  # the contract pages with the shipped suite
    submissions = [
        make_submission(project, "a11y.kernels", ALL_PASS),
        make_submission(project, "a11y.kernels", {**ALL_PASS, "C-PRC-01": "FAIL"}),
        make_submission(project, "other.kernels", ALL_PASS, device="cuda"),
    ]
    # stored numbers empty: its figures become empty states
    audit = TrainingAudit.objects.create(project=project, rollout_numerics="bf16", completed_at=timezone.now())
    rule = alert_services.create_rule(
        project=project, created_by="a11y", data={"name": "B* budget", "kind": "budget", "threshold": 0.05}
    )
    return World(submissions, audit, rule)
