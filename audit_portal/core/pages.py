"""What every server-rendered page needs in its context: who is asking, their projects, and — on a project's
pages — the project (404 if the caller may not read it) and what the caller may do there."""

from __future__ import annotations

from django.http import Http404

from audit_portal.accounts import selectors as account_selectors
from audit_portal.accounts.principal import Principal


def page_context(request, slug: str | None = None, **extra) -> dict:
    principal = Principal.from_request(request)
    ctx = {"principal": principal, "projects": account_selectors.projects_for(principal)}
    if slug is not None:
        project = account_selectors.get_project(principal, slug)
        ctx.update(
            project=project,
            role=principal.role_in(project),
            can_submit=principal.can_submit(project),
            can_manage=principal.can_manage(project),
        )
    ctx.update(extra)
    return ctx


def require_in_project(ctx: dict, project_id: int) -> None:
    """404 unless an object the URL names belongs to the page's project: another project's id in this project's
    URL must not render (not even as 403, which would confirm that the object exists)."""
    if project_id != ctx["project"].pk:
        raise Http404


def paginate(request, queryset, per_page: int = 50) -> dict:
    """One page of ``queryset`` for a server-rendered list: ``page_obj`` (a Django Page; ``?page=`` out of range or not a
    number gives the nearest page) and ``query_without_page``, the other query parameters for the page links."""
    from django.core.paginator import Paginator

    page_obj = Paginator(queryset, per_page).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return {"page_obj": page_obj, "query_without_page": query.urlencode()}


# --- POST-redirect-GET for answers that show something once (a new secret, a new API key) ------------------------
# The POST stores what to show in the server-side session and redirects; the next GET of the page takes it (and so
# a reload shows it no more and re-posts nothing). Sessions live in the database (django.contrib.sessions' default
# backend), never in a cookie, so a secret put here does not travel to the browser except in that one page.
def show_once(request, key: str, value) -> None:
    request.session[f"show-once:{key}"] = value


def take_shown_once(request, key: str, default=None):
    return request.session.pop(f"show-once:{key}", default)
