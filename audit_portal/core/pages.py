"""What every server-rendered page needs in its context: who is asking, their projects, and — on a project's
pages — the project (404 if the caller may not read it) and what the caller may do there."""

from __future__ import annotations

from functools import wraps

from django.contrib.auth.decorators import login_required

from audit_portal.accounts import selectors as account_selectors
from audit_portal.accounts.principal import Principal


# --- who is asking, and in which project: resolved once, by the decorator, before the page's own code -------------
# The API does the same in its permission classes (audit_portal/accounts/permissions.py); pages are plain Django
# views, so a decorator does it for them.
def signed_in_page(view):
    """A page for signed-in users (anyone else is sent to the login page); ``request.principal`` is the caller."""

    @login_required
    @wraps(view)
    def page(request, *args, **kwargs):
        request.principal = Principal.from_request(request)
        return view(request, *args, **kwargs)

    return page


def project_page(view):
    """A signed-in page under ``/p/<slug>/``: ``request.project`` is that project, or the page is a 404 when the
    caller may not read it (the same page as for a project that does not exist)."""

    @signed_in_page
    @wraps(view)
    def page(request, slug, *args, **kwargs):
        request.project = account_selectors.get_project(request.principal, slug)
        return view(request, slug, *args, **kwargs)

    return page


def page_context(request, project=None, **extra) -> dict:
    """The caller and their projects; on a project's page (``request.project``, or ``project`` for a page reached by
    an object's id) also the project and what the caller may do there."""
    principal = request.principal
    ctx = {"principal": principal, "projects": account_selectors.projects_for(principal)}
    project = project or getattr(request, "project", None)
    if project is not None:
        ctx.update(
            project=project,
            role=principal.role_in(project),
            can_submit=principal.can_submit(project),
            can_manage=principal.can_manage(project),
        )
    ctx.update(extra)
    return ctx


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
