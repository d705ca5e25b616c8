"""Writes for live runs: a new segment's partial certificate merged into the run's under a row lock (the lock and
the store are here; the engine's merge runs between them in the task, pipelines/live.py, so this module never
imports a torch-based engine); and the JSON the run page and its websocket show."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction
from django.utils import timezone

from audit_portal.alerts.events import run_group
from audit_portal.alerts.selectors import firing_for_run
from audit_portal.core.broadcast import publish
from audit_portal.core.errors import PortalError
from audit_portal.live.models import LiveRun, LiveSegment
from workers.certify.verdict import run_verdict

SKIPPED_KEPT = 20
SERIES = (
    ("eps_hat_max", None),
    ("acceptance_rate", None),
    ("abs_diff_mean", "metrics"),
    ("abs_diff_p99", "metrics"),
    ("mis_mask_rate", "metrics"),
    ("k3", "metrics"),
)


STEP_RANGE = re.compile(r"^\s*(\d{1,12})\s*(?:-\s*(\d{1,12}))?\s*$")


def parse_step_range(text) -> tuple[int, int] | None:
    """``"A-B"`` or ``"A"`` (0 ≤ A ≤ B) from an upload's ``steps`` field; None when absent; a 400 otherwise."""
    if text in (None, ""):
        return None
    m = STEP_RANGE.match(text) if isinstance(text, str) else None
    if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise PortalError(
            "steps: a step number or a range A-B of step numbers (A ≤ B), e.g. 16-23",
            code="invalid_step_range",
            extra={"field": "steps"},
        )
    first = int(m.group(1))
    return first, int(m.group(2) or first)


RANK = re.compile(r"^\s*(\d{1,6})\s*$")


def parse_rank(text) -> int | None:
    """The ``rank`` field of a segment upload: the process (0, 1, …) of a multi-process run that wrote it; None when
    absent (rank 0); a 400 otherwise."""
    if text in (None, ""):
        return None
    m = RANK.match(text) if isinstance(text, str) else None
    if m is None:
        raise PortalError(
            "rank: the process number (0, 1, …) of the run that wrote this segment, e.g. 3",
            code="invalid_rank",
            extra={"field": "rank"},
        )
    return int(m.group(1))


def tag_segment(upload, step_range: tuple[int, int], fields: dict | None = None) -> None:
    """Declare ``upload`` a segment of its growing run, written by process ``fields["rank"]`` (default 0) (the first
    declaration of the same bytes stands)."""
    LiveSegment.objects.get_or_create(
        upload=upload,
        defaults={"first_step": step_range[0], "last_step": step_range[1], "rank": (fields or {}).get("rank") or 0},
    )


def held_steps(live: LiveRun | None, rank: int = 0) -> set:
    """The steps of process ``rank`` that the live view holds."""
    return set((live.ranks or {}).get(str(rank)) or []) if live is not None else set()


def rank_ranges(live: LiveRun) -> list[dict]:
    """Per process (rank) of the run, ascending: its steps merged as a count and as ranges ``[[first, last], …]``."""
    out = []
    for rank, steps in sorted(((int(r), s) for r, s in (live.ranks or {}).items()), key=lambda x: x[0]):
        ranges: list[list[int]] = []
        for step in steps:
            if ranges and step == ranges[-1][1] + 1:
                ranges[-1][1] = step
            else:
                ranges.append([step, step])
        out.append({"rank": rank, "steps": len(steps), "ranges": ranges})
    return out


def refusal(
    live: LiveRun | None, upload_id: int, steps: list, declared: tuple[int, int] | None = None, rank: int = 0
) -> str | None:
    """Why an upload is not merged into the live view, or None. An upload of process ``rank`` whose steps that rank
    already sent (the whole run uploaded again at ``finish``, a segment certified twice, a resumed process logging a
    step again) would count them twice, so it is left out. Another rank's sequences of the same step are new: they
    merge into that step (the per-step rows then count every rank's sequences)."""
    if live is not None and upload_id in live.uploads:
        return "already merged"
    if not steps:
        return "no step numbers: records without a step cannot be placed in the run's timeline"
    if any(s is None for s in steps):
        return "some records carry no step number"
    if declared is not None and not declared[0] <= min(steps) <= max(steps) <= declared[1]:
        return f"steps {min(steps)}–{max(steps)} lie outside the declared range {declared[0]}–{declared[1]}"
    if live is not None:
        overlap = sorted(set(steps) & held_steps(live, rank))
        if overlap:
            return (
                f"steps {overlap[0]}–{overlap[-1]} of rank {rank} are already in the live view ({len(overlap)} "
                f"of this upload's {len(steps)}): not merged again"
            )
    return None


@contextmanager
def locked_for_segment(
    run, upload_id: int, steps: list, plan: dict, declared: tuple[int, int] | None = None, rank: int = 0
) -> Iterator[LiveRun | None]:
    """The run's live view, locked for one transaction, when the upload of process ``rank`` (certified under
    ``plan``) may join it; else None, the reason kept in ``skipped``. Inside the block the caller merges the
    upload's partial into ``view.partial`` with the engine and calls :func:`store_segment`."""
    with transaction.atomic():
        live, _ = LiveRun.objects.get_or_create(run=run, defaults={"plan": plan})
        live = LiveRun.objects.select_for_update().get(pk=live.pk)
        reason = refusal(live, upload_id, steps, declared, rank)
        if reason is None and live.uploads and live.plan != plan:
            reason = "certified under other options than the run's first segment"
        if reason is not None and reason != "already merged":
            live.skipped = ([{"upload": upload_id, "reason": reason}] + live.skipped)[:SKIPPED_KEPT]
            live.save(update_fields=["skipped"])
        yield live if reason is None else None


def store_segment(
    live: LiveRun, upload_id: int, steps: list, plan: dict, rank: int, partial: dict, certificate: dict
) -> LiveRun:
    """Store the merged ``partial`` and its ``certificate`` (the engine's summary) on the locked view from
    :func:`locked_for_segment`, with the verdict, the steps and ranks it now holds; published after the commit."""
    live.partial, live.certificate = partial, certificate
    verdict = run_verdict(
        certificate.get("summary") or {},
        certificate.get("bounds") or {},
        certificate.get("options") or plan.get("opts") or {},
    )
    live.verdict, live.verdict_detail = verdict.code, verdict.as_dict()
    live.plan = plan
    live.steps = sorted(set(live.steps) | set(steps))
    live.ranks = {**(live.ranks or {}), str(rank): sorted(held_steps(live, rank) | set(steps))}
    live.uploads = [*live.uploads, upload_id]
    live.updated_at = timezone.now()
    live.save()
    transaction.on_commit(lambda: publish_live(live))
    return live


def mark_processed(upload_id: int) -> None:
    LiveSegment.objects.filter(upload_id=upload_id, processed_at__isnull=True).update(processed_at=timezone.now())


def lost_segments(now=None, after_seconds: float = 300.0) -> list[int]:
    """Certificates of segments whose follow-up never ran (its message lost), completed over ``after_seconds`` ago:
    the periodic sweep queues their follow-up again (a repeat merges nothing twice)."""
    from datetime import timedelta

    from audit_portal.certificates.models import RunCertificate

    cut = (now or timezone.now()) - timedelta(seconds=after_seconds)
    # A plain upload has no segment at all, and a missing row reads as a NULL processed_at in the join: only
    # certificates of uploads that *are* segments can have a lost follow-up.
    return list(
        RunCertificate.objects.filter(
            upload__live_segment__isnull=False,
            upload__live_segment__processed_at__isnull=True,
            state=RunCertificate.State.COMPLETE,
            completed_at__lt=cut,
        )
        .order_by("pk")
        .values_list("pk", flat=True)[:500]
    )


def budget_verdicts(live: LiveRun) -> list[dict]:
    """The run so far against every budget of its project's enabled budget rules (the alerts page sets them)."""
    from audit_portal.alerts.models import AlertRule
    from audit_portal.alerts.rules import BUDGET

    best = (live.certificate.get("bounds") or {}).get("best")
    out = []
    for rule in AlertRule.objects.filter(project_id=live.run.project_id, kind=BUDGET, enabled=True).order_by("pk"):
        meets = best is not None and best <= rule.threshold
        out.append({"rule": rule.pk, "name": rule.name, "budget": rule.threshold, "meets": meets})
    return out


def live_json(live: LiveRun) -> dict:
    """What the run page draws and its websocket pushes: headline numbers, per-step series, budget verdicts."""
    cert = live.certificate or {}
    s, bounds = cert.get("summary") or {}, cert.get("bounds") or {}
    rows = [r for r in cert.get("steps") or [] if r.get("step") is not None]
    series = {"step": [r["step"] for r in rows]}
    for key, under in SERIES:
        series[key] = [((r.get(under) or {}) if under else r).get(key) for r in rows]
    return {
        "run": live.run_id,
        "steps": len(live.steps),
        "first_step": live.steps[0] if live.steps else None,
        "last_step": live.steps[-1] if live.steps else None,
        "ranks": rank_ranges(live),
        "uploads": len(live.uploads),
        "merged_uploads": list(live.uploads),
        "skipped_uploads": [s.get("upload") for s in live.skipped],
        "summary": {
            k: s.get(k)
            for k in (
                "sequences",
                "tokens",
                "accepted",
                "acceptance_rate",
                "eps_hat",
                "delta_hat",
                "T_ref",
                "threshold",
                "data_errors",
            )
        },
        "best_bound": bounds.get("best"),
        "best_bound_id": bounds.get("argmin"),
        "series": series,
        "verdict": live.verdict_detail or None,
        "budgets": budget_verdicts(live),
        "firing": firing_for_run(live.run_id),
        "skipped": live.skipped[:5],
        "updated_at": live.updated_at.isoformat(),
    }


def alerts_snapshot(live: LiveRun) -> dict:
    """The live view in the shape alert rules read (audit_portal/alerts/rules.py)."""
    cert = live.certificate or {}
    steps = [
        {
            "step": r["step"],
            "eps_hat_max": r.get("eps_hat_max"),
            "abs_diff_mean": (r.get("metrics") or {}).get("abs_diff_mean"),
            "mis_mask_rate": (r.get("metrics") or {}).get("mis_mask_rate"),
        }
        for r in cert.get("steps") or []
        if r.get("step") is not None
    ]
    return {
        "certified": bool(cert),
        "best_bound": (cert.get("bounds") or {}).get("best"),
        "steps": steps,
        "as_of": live.updated_at,
    }


def publish_live(live: LiveRun) -> None:
    publish({"type": "run.live", "live": live_json(live)}, run_group(live.run_id))
