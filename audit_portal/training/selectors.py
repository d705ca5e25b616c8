"""Reads for training-step audits, scoped by the caller's readable projects (a foreign audit is a 404)."""

from __future__ import annotations

from audit_portal.accounts.principal import Principal
from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.training.models import TrainingAudit


def audits_for(principal: Principal, project=None):
    qs = TrainingAudit.objects.filter(project__in=principal.readable_projects()).select_related("project", "job")
    return qs.filter(project=project) if project is not None else qs


def get_audit(principal: Principal, audit_id: int, project=None) -> TrainingAudit:
    return get_scoped_or_404(audits_for(principal), project, pk=audit_id)
