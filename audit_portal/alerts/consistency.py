"""The alerts' consistency checks (registered with :mod:`audit_portal.jobs.consistency`, run by
``manage.py check_consistency``): no webhook delivery left pending past its due time with nothing to take it, no
firing state without the event that fired it."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from audit_portal.alerts.models import AlertEvent, AlertState, WebhookDelivery
from audit_portal.jobs.consistency import Report, Scope, register

SWEEP_SECONDS = 300  # the sweep_alerts task (pipelines/alerts.py) resends what is overdue by this much


def in_scope(scope: Scope, queryset, path: str):
    return queryset if scope.project is None else queryset.filter(**{path: scope.project})


@register
def check_alerts(report: Report, scope: Scope) -> None:
    cut = timezone.now() - timedelta(seconds=scope.grace_seconds + 2 * SWEEP_SECONDS)
    pending = in_scope(scope, WebhookDelivery.objects.filter(state=WebhookDelivery.PENDING), "event__rule__project")
    report.counts["webhook_deliveries_pending"] += pending.count()
    for d in pending.filter(Q(next_attempt_at__lt=cut) | Q(next_attempt_at__isnull=True, created_at__lt=cut))[:100]:
        report.problem(
            f"webhook delivery {d.pk} (event {d.event_id}) is pending, due since "
            f"{(d.next_attempt_at or d.created_at).isoformat()}: no worker has attempted it "
            "(is the cpu worker with its beat running?)"
        )
    states = in_scope(scope, AlertState.objects.filter(firing=True), "rule__project")
    report.counts["alert_states_firing"] += states.count()
    for s in states.iterator(chunk_size=500):
        if not AlertEvent.objects.filter(rule_id=s.rule_id, run_id=s.run_id, kind=AlertEvent.FIRED).exists():
            report.problem(f"alert rule {s.rule_id} is firing for run {s.run_id} without a fired event")
