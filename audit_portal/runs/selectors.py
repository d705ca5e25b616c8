"""Reads for runs and uploads, scoped by the caller's readable projects."""

from __future__ import annotations

from django.http import Http404

from audit_portal.accounts.principal import Principal
from audit_portal.runs.models import Run, Upload


def uploads_for(principal: Principal, project=None):
    qs = Upload.objects.filter(project__in=principal.readable_projects()).select_related(
        "project", "run", "duplicate_of"
    )
    return qs.filter(project=project) if project is not None else qs


def get_upload(principal: Principal, upload_id: int) -> Upload:
    upload = uploads_for(principal).filter(pk=upload_id).first()
    if upload is None:
        raise Http404("No such upload.")
    return upload


def runs_for(principal: Principal, project=None):
    qs = Run.objects.filter(project__in=principal.readable_projects()).select_related("project")
    return qs.filter(project=project) if project is not None else qs


def get_run(principal: Principal, run_id: int) -> Run:
    run = runs_for(principal).filter(pk=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return run
