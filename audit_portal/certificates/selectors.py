"""Reads for certificates, scoped by the caller's readable projects."""

from __future__ import annotations

from django.http import Http404

from audit_portal.accounts.principal import Principal
from audit_portal.certificates.models import RunCertificate


def certificates_for(principal: Principal, project=None):
    qs = RunCertificate.objects.filter(project__in=principal.readable_projects(), state=RunCertificate.State.COMPLETE)
    qs = qs.select_related("project", "run", "upload")
    return qs.filter(project=project) if project is not None else qs


def get_certificate(principal: Principal, certificate_id: int) -> RunCertificate:
    certificate = certificates_for(principal).filter(pk=certificate_id).first()
    if certificate is None:
        raise Http404("No such certificate.")
    return certificate


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
