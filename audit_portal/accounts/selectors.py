"""Reads for accounts, scoped by the caller."""

from __future__ import annotations

from audit_portal.accounts.models import ApiKey, Project
from audit_portal.accounts.principal import Principal
from audit_portal.accounts.scoping import get_scoped_or_404


def projects_for(principal: Principal):
    return principal.readable_projects().order_by("name")


def get_project(principal: Principal, slug: str) -> Project:
    """The project if the caller may read it; 404 otherwise (never reveal that it exists)."""
    return get_scoped_or_404(projects_for(principal), slug=slug)


def api_keys_for(principal: Principal, project: Project):
    if not principal.can_manage(project):
        return ApiKey.objects.none()
    return ApiKey.objects.filter(project=project).select_related("created_by")
