"""Reads for certificates, scoped by the caller's readable projects."""

from __future__ import annotations

from audit_portal.accounts.principal import Principal
from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.certificates.models import RunCertificate


def certificates_for(principal: Principal, project=None):
    qs = RunCertificate.objects.filter(project__in=principal.readable_projects(), state=RunCertificate.State.COMPLETE)
    qs = qs.select_related("project", "run", "upload")
    return qs.filter(project=project) if project is not None else qs


def get_certificate(principal: Principal, certificate_id: int) -> RunCertificate:
    return get_scoped_or_404(certificates_for(principal), noun="certificate", pk=certificate_id)


def latest_for_run(principal: Principal, run) -> RunCertificate | None:
    return certificates_for(principal).filter(run=run).order_by("-created_at", "-id").first()


def run_verdict(run) -> dict | None:
    """The run's verdict (workers/certify/verdict.py) from its newest complete certificate; None before one exists.
    For messages about a run the caller already may read (alerts), so it is not scoped again."""
    latest = (
        RunCertificate.objects.filter(run=run, state=RunCertificate.State.COMPLETE)
        .exclude(verdict="")
        .order_by("-created_at", "-id")
        .values("verdict_detail")
        .first()
    )
    return latest["verdict_detail"] if latest else None


def sequences(certificate: RunCertificate, *, status: str | None = None, step: int | None = None, accepted=None):
    qs = certificate.sequence_summaries.all()
    if status:
        qs = qs.filter(status=status)
    if step is not None:
        qs = qs.filter(step=step)
    if accepted is not None:
        qs = qs.filter(accept=accepted)
    return qs.order_by("line", "id")


def divergence_sources(certificate: RunCertificate, n: int = 3) -> dict:
    """Where a certificate's divergence comes from, for the run page's "what to do next": the steps with the largest
    certified token TV, the sequences with the largest, and the share of sequences by status. Two small queries."""
    steps = list(
        certificate.steps.exclude(eps_hat_max=None)
        .order_by("-eps_hat_max", "step")
        .values("step", "eps_hat_max", "acceptance_rate", "sequences")[:n]
    )
    worst = list(
        certificate.sequence_summaries.exclude(eps_hat=None)
        .order_by("-eps_hat", "line")
        .only("line", "call_id", "step", "eps_hat", "status", "length")[:n]
    )
    counts = (certificate.summary.get("status_counts") or {}).get("sequences") or {}
    total = sum(counts.values()) or 0
    return {
        "steps": steps,
        "sequences": worst,
        "statuses": [{"status": k, "count": v, "share": v / total} for k, v in sorted(counts.items()) if v],
    }


COMPARED = ["tokens", "sequences", "acceptance_rate", "eps_hat", "delta_hat", "best_bound", "data_errors"]
COMPARISON_CAVEAT = "Certificates hold on the contexts each run visited; comparing them compares those samples."


def compare(a: RunCertificate, b: RunCertificate) -> dict:
    """Two certificates side by side: headline numbers, every bound, and the differences (b − a)."""

    def diff(x, y):
        return None if x is None or y is None else y - x

    headline = {
        k: {"a": getattr(a, k), "b": getattr(b, k), "diff": diff(getattr(a, k), getattr(b, k))} for k in COMPARED
    }
    bounds = {
        k: {"a": a.bounds.get(k), "b": b.bounds.get(k), "diff": diff(a.bounds.get(k), b.bounds.get(k))}
        for k in sorted(set(a.bounds) | set(b.bounds))
        if k != "argmin"
    }
    return {
        "a": {"id": a.pk, "run": a.run_id, "upload": a.upload_id, "argmin": a.bounds.get("argmin")},
        "b": {"id": b.pk, "run": b.run_id, "upload": b.upload_id, "argmin": b.bounds.get("argmin")},
        "headline": headline,
        "bounds": bounds,
        "caveat": COMPARISON_CAVEAT,
    }
