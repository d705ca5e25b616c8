"""Reads for runs and uploads, scoped by the caller's readable projects."""

from __future__ import annotations

from audit_portal.accounts.principal import Principal
from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.runs.models import Run, Upload


def uploads_for(principal: Principal, project=None):
    qs = Upload.objects.filter(project__in=principal.readable_projects()).select_related(
        "project", "run", "duplicate_of"
    )
    return qs.filter(project=project) if project is not None else qs


def get_upload(principal: Principal, upload_id: int) -> Upload:
    return get_scoped_or_404(uploads_for(principal), pk=upload_id)


def runs_for(principal: Principal, project=None):
    qs = Run.objects.filter(project__in=principal.readable_projects()).select_related("project")
    return qs.filter(project=project) if project is not None else qs


def get_run(principal: Principal, run_id: int) -> Run:
    return get_scoped_or_404(runs_for(principal), pk=run_id)
