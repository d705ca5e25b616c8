"""A run that grows while it trains: the merged partial certificate of every step streamed in so far.

Each segment a client uploads (or any upload of the run whose steps are new) is certified into a partial under the
run's plan and merged into ``partial`` (workers/certify/partial.py: associative, exact), so a new step costs its own
certification and one merge, never a pass over earlier steps. ``certificate`` is the run certificate of the merged
partial (summary, bounds, per-step rows with the mismatch metrics)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from audit_portal.runs.models import Run


class LiveRun(models.Model):
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="live")
    plan = models.JSONField(default=dict)  # the certify options fixed by the first segment (plan_certificate)
    partial = models.JSONField(default=dict)  # Partial.to_json(): O(#steps + longest response + max_errors)
    certificate = models.JSONField(default=dict)  # summarise(partial, plan)
    steps = models.JSONField(default=list)  # step numbers merged, ascending, each once (whatever the ranks)
    # {"<rank>": [step, ...] ascending}: the (rank, step) pairs merged. Each process (rank) of a run logs its own
    # sequences of a step, so one step may arrive once per rank; only a (rank, step) pair seen before is refused.
    ranks = models.JSONField(default=dict)
    uploads = models.JSONField(default=list)  # upload ids merged (a retried follow-up merges nothing twice)
    skipped = models.JSONField(default=list)  # the latest uploads not merged, with the reason (at most 20)
    verdict = models.CharField(max_length=20, blank=True)  # of the merged certificate (workers/certify/verdict.py)
    verdict_detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"live view of run {self.run_id} ({len(self.steps)} steps)"


class LiveSegment(models.Model):
    """An upload declared as steps ``first_step``–``last_step`` of a growing run (the client's segments, or any upload
    sent with ``steps=A-B``): only such uploads grow the live view, so a whole run uploaded once is certified once.
    ``rank`` (the upload's ``rank`` field, default 0) is the process of a multi-process run that wrote the segment."""

    upload = models.OneToOneField("runs.Upload", on_delete=models.CASCADE, related_name="live_segment")
    first_step = models.BigIntegerField()
    last_step = models.BigIntegerField()
    rank = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    processed_at = models.DateTimeField(null=True)  # merged or left out by the follow-up (None: not yet)
