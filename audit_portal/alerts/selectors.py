"""Reads for alerts, scoped by the caller's readable projects (a foreign rule or run is a 404); and the run snapshot
the evaluation reads (internal: called by the worker's task, never with a caller's input)."""

from __future__ import annotations

from audit_portal.accounts.principal import Principal
from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.alerts.models import AlertEvent, AlertRule, AlertState, WebhookDelivery


def rules_for(principal: Principal, project=None):
    qs = AlertRule.objects.filter(project__in=principal.readable_projects()).select_related("project")
    return qs.filter(project=project) if project is not None else qs


def get_rule(principal: Principal, rule_id: int, project=None) -> AlertRule:
    return get_scoped_or_404(rules_for(principal), project, pk=rule_id)


def states_of(rule: AlertRule, limit: int = 50):
    """The rule's state per run, firing ones first, then the most recently evaluated."""
    return rule.states.select_related("run").order_by("-firing", "-evaluated_at", "-id")[:limit]


def states_for_run(run) -> dict[int, AlertState]:
    return {s.rule_id: s for s in AlertState.objects.filter(run=run)}


def firing_for_run(run_id: int) -> list[dict]:
    """The enabled rules firing for the run now (the banners of its page, also when it is opened after they fired)."""
    states = AlertState.objects.filter(run_id=run_id, firing=True, rule__enabled=True).select_related("rule")
    return [
        {
            "rule": s.rule_id,
            "name": s.rule.name,
            "value": s.value,
            "message": s.message,
            "since": s.changed_at.isoformat() if s.changed_at else None,
        }
        for s in states.order_by("rule_id")
    ]


def events_for(project, limit: int = 50):
    return AlertEvent.objects.filter(rule__project=project).select_related("rule", "run")[:limit]


def deliveries_for(project, limit: int = 50):
    return WebhookDelivery.objects.filter(event__rule__project=project).select_related("event__rule", "event__run")[
        :limit
    ]


def run_snapshot(run) -> dict:
    """A run's newest complete certificate as rules.py reads it (a run that streams steps is read from its live view
    instead: audit_portal/live/services.alerts_snapshot)."""
    from audit_portal.certificates.models import RunCertificate

    certificate = (
        RunCertificate.objects.filter(run=run, state=RunCertificate.State.COMPLETE)
        .order_by("-created_at", "-id")
        .first()
    )
    if certificate is None:
        return {"certified": False, "best_bound": None, "steps": []}
    steps = [
        {
            "step": s.step,
            "eps_hat_max": s.eps_hat_max,
            "abs_diff_mean": (s.metrics or {}).get("abs_diff_mean"),
            "mis_mask_rate": (s.metrics or {}).get("mis_mask_rate"),
        }
        for s in certificate.steps.order_by("step").only("step", "eps_hat_max", "metrics")
    ]
    return {"certified": True, "best_bound": certificate.best_bound, "steps": steps, "as_of": certificate.completed_at}
