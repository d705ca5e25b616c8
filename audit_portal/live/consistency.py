"""The live runs' consistency checks (registered with :mod:`audit_portal.jobs.consistency`, run by
``manage.py check_consistency``): no segment certificate whose follow-up never ran, and every live view holding
exactly the steps its certificate shows (and its ranks' steps together), each upload merged once."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from audit_portal.alerts.consistency import SWEEP_SECONDS, in_scope
from audit_portal.certificates.models import RunCertificate
from audit_portal.jobs.consistency import Report, Scope, register
from audit_portal.live.models import LiveRun


@register
def check_live_runs(report: Report, scope: Scope) -> None:
    cut = timezone.now() - timedelta(seconds=scope.grace_seconds + 2 * SWEEP_SECONDS)
    lost = in_scope(
        scope,
        RunCertificate.objects.filter(
            upload__live_segment__processed_at__isnull=True, state=RunCertificate.State.COMPLETE, completed_at__lt=cut
        ),
        "project",
    )
    for cert in lost.values_list("pk", "upload_id")[:100]:
        report.problem(
            f"certificate {cert[0]} of segment upload {cert[1]}: its follow-up (merge into the run's live "
            "view, alert rules) never ran"
        )
    for live in in_scope(scope, LiveRun.objects.all(), "run__project").iterator(chunk_size=100):
        report.counts["live_runs"] += 1
        shown = sorted(r["step"] for r in (live.certificate or {}).get("steps") or [])
        if shown != live.steps:
            report.problem(
                f"live view of run {live.run_id}: {len(live.steps)} steps recorded as merged, its "
                f"certificate shows {len(shown)}"
            )
        by_rank = set().union(*(set(v) for v in (live.ranks or {}).values()))
        if sorted(by_rank) != live.steps:
            report.problem(
                f"live view of run {live.run_id}: its ranks hold {len(by_rank)} steps, "
                f"{len(live.steps)} recorded as merged"
            )
        if len(set(live.uploads)) != len(live.uploads):
            report.problem(f"live view of run {live.run_id}: an upload was merged twice")
