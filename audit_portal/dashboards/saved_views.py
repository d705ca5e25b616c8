"""Saved views of the runs table: reads scoped by the caller (their own views in a project they may read) and the
writes (save, delete). A view is the table's query string, cut down to the keys the table understands."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.http import QueryDict

from audit_portal.accounts.models import Project
from audit_portal.accounts.principal import Principal
from audit_portal.dashboards import tables
from audit_portal.dashboards.models import SavedView
from audit_portal.runs.models import Run

MAX_VIEWS_PER_USER = 50
QUERY_KEYS = frozenset(
    {"q", "verdict", "sort", "cols"} | {f"{side}_{c.key}" for c in tables.RANGE_COLUMNS for side in ("min", "max")}
)


class SavedViewError(ValueError):
    """A view that cannot be saved, with the reason in words."""


def views_for(principal: Principal, project: Project):
    """The caller's own views in ``project`` (none for an API key or a project they may not read)."""
    if principal.user is None or not principal.can_read(project):
        return SavedView.objects.none()
    return SavedView.objects.filter(project=project, owner=principal.user)


def in_project(project: Project):
    """Every member's views in ``project`` (a page already checked the caller may read it): only to tell "not yours"
    from "not in this project" when deleting; never listed."""
    return SavedView.objects.filter(project=project)


def clean_query(raw: str) -> str:
    """The runs table's query string with only its known, non-empty keys (no page, no export format), checked the way
    the table checks it, so that a saved view always opens."""
    params = QueryDict(raw or "")
    kept = QueryDict(mutable=True)
    for key in sorted(params):
        if key in QUERY_KEYS:
            values = [v for v in params.getlist(key) if v.strip()]
            if values:
                kept.setlist(key, values)
    try:
        tables.filter_runs(tables.runs_table(Run.objects.none()), kept)
        tables.visible_columns(kept, [])
    except tables.TableInputError as exc:
        raise SavedViewError(str(exc)) from exc
    query = kept.urlencode()
    if len(query) > SavedView._meta.get_field("query").max_length:
        raise SavedViewError("the query is too long to save")
    return query


def save_view(principal: Principal, project: Project, name: str, raw_query: str) -> SavedView:
    """Save (or replace, under the same name) the caller's view of the runs table."""
    name = " ".join((name or "").split())
    if not name:
        raise SavedViewError("give the view a name")
    if len(name) > SavedView._meta.get_field("name").max_length:
        raise SavedViewError("the name is longer than 80 characters")
    if principal.user is None or not principal.can_read(project):
        raise SavedViewError("only a signed-in member of the project can save views")
    query = clean_query(raw_query)
    mine = views_for(principal, project)
    existing = mine.filter(name=name).first()
    if existing is not None:
        existing.query = query
        existing.save(update_fields=["query"])
        return existing
    if mine.count() >= MAX_VIEWS_PER_USER:
        raise SavedViewError(f"you have {MAX_VIEWS_PER_USER} saved views here already; delete one first")
    try:
        with transaction.atomic():
            return SavedView.objects.create(project=project, owner=principal.user, name=name, query=query)
    except IntegrityError as exc:  # the same name saved at the same moment by another tab
        raise SavedViewError(f"a view named {name!r} was just saved; try again") from exc


def delete_view(view: SavedView) -> None:
    view.delete()
