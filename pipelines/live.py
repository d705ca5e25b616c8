"""The follow-up of every completed certificate of a run (queued by audit_portal/alerts/signals.py): an upload declared
as a segment (a step range) is merged into the run's live view when its (rank, step) pairs are new — certified once more under the
run's plan into a partial of this upload only, merged, earlier steps untouched — then the project's alert rules are
evaluated on the run so far (the live view when there is one, else the newest certificate). ``evaluate_alert_rules``
evaluates them again on runs whose rule was changed.

Keyword arguments only: jobs/signals.py reads a positional int of a failed ``audit_portal.task_names`` task as a Job id."""

import logging

from celery import shared_task

from audit_portal import task_names
from audit_portal.alerts import selectors as alert_selectors
from audit_portal.alerts import services as alerts
from audit_portal.certificates.models import RunCertificate
from audit_portal.core.storage import artifact_path
from audit_portal.live import services as live
from audit_portal.live.models import LiveRun, LiveSegment
from audit_portal.runs.models import Run

log = logging.getLogger(__name__)


def _combine(merged: dict | None, part: dict):
    from workers.certify.file import summarise
    from workers.certify.partial import Partial

    plan, part = part["plan"], Partial.from_json(part["partial"])
    total = part if merged is None else Partial.from_json(merged).merge(part)
    return total.to_json(), summarise(total, plan)


@shared_task(name=task_names.RUN_CERTIFICATE_COMPLETED, acks_late=True)
def run_certificate_completed(certificate_id: int | None = None) -> str:
    certificate = (
        RunCertificate.objects.select_related("run", "upload")
        .filter(pk=certificate_id, state=RunCertificate.State.COMPLETE)
        .first()
    )
    if certificate is None or certificate.run is None:
        if certificate is not None:
            live.mark_processed(certificate.upload_id)  # nothing to grow: the sweep need not come back
        return "skipped"
    run, upload = certificate.run, certificate.upload
    segment = LiveSegment.objects.filter(upload=upload).first()
    view = LiveRun.objects.filter(run=run).first()
    if segment is not None:  # a declared step range: grow the run's live view
        declared = (segment.first_step, segment.last_step)
        steps = sorted(set(certificate.steps.values_list("step", flat=True)), key=lambda s: (s is None, s or 0))
        part, plan = {}, view.plan if view is not None and view.plan else None
        if live.refusal(view, upload.pk, steps, declared, segment.rank) is None:
            from workers.certify.file import certify_part, plan_certificate  # torch: imported by workers only

            path = artifact_path(upload.storage_name)
            plan = plan or plan_certificate(path)
            part = {"plan": plan, "partial": certify_part(path, plan).to_json()}  # this upload's steps only
        view = None
        with live.locked_for_segment(run, upload.pk, steps, plan or {}, declared, segment.rank) as locked:
            if locked is not None:  # the engine's merge and summary, under the view's row lock
                partial, merged = _combine(locked.partial or None, part)
                view = live.store_segment(locked, upload.pk, steps, plan or {}, segment.rank, partial, merged)
        view = view or LiveRun.objects.filter(run=run).first()
        live.mark_processed(upload.pk)
    raised = alerts.evaluate_run(run, _alert_snapshot(run, view))
    return f"{len(raised)} alert event(s)"


@shared_task(name=task_names.EVALUATE_ALERT_RULES, acks_late=True)
def evaluate_alert_rules(run_ids: list[int] | None = None) -> str:
    """Evaluate the project's rules again on each run's latest data (queued when a rule's condition was changed:
    audit_portal/alerts/services.update_rule). A run deleted meanwhile is skipped."""
    raised = 0
    for run in Run.objects.filter(pk__in=run_ids or []).order_by("pk"):
        raised += len(alerts.evaluate_run(run, _alert_snapshot(run, LiveRun.objects.filter(run=run).first())))
    return f"{raised} alert event(s)"


def _alert_snapshot(run, view):
    """What the rules read: the run so far (its live view) when it streams steps, else its newest certificate."""
    return live.alerts_snapshot(view) if view is not None else alert_selectors.run_snapshot(run)
