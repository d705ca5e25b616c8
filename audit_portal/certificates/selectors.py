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


def sequences(certificate: RunCertificate, *, status: str | None = None, step: int | None = None, accepted=None):
    qs = certificate.sequence_summaries.all()
    if status:
        qs = qs.filter(status=status)
    if step is not None:
        qs = qs.filter(step=step)
    if accepted is not None:
        qs = qs.filter(accept=accepted)
    return qs.order_by("line", "id")
