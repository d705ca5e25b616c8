"""Reads for accounts, scoped by the caller."""

from __future__ import annotations

from django.http import Http404

from audit_portal.accounts.models import ApiKey, Project
from audit_portal.accounts.principal import Principal


def projects_for(principal: Principal):
    return principal.readable_projects().order_by("name")


def get_project(principal: Principal, slug: str) -> Project:
    """The project if the caller may read it; 404 otherwise (never reveal that it exists)."""
    project = projects_for(principal).filter(slug=slug).first()
    if project is None:
        raise Http404("No such project.")
    return project


def api_keys_for(principal: Principal, project: Project):
    if not principal.can_manage(project):
        return ApiKey.objects.none()
    return ApiKey.objects.filter(project=project).select_related("created_by")
