"""One lookup for every object a URL names by id: it must be in what the caller may read (a selector's queryset),
and in the URL's project when the URL has one. Anything else is the same 404 — absent, another tenant's, or another
project's — so the answer never tells a stranger that the object exists."""

from __future__ import annotations

from django.http import Http404


def get_scoped_or_404(scoped, project=None, /, *, noun: str | None = None, **lookup):
    """The one object of ``scoped`` (a queryset already limited to the caller, e.g. ``runs_for(principal)``) that
    matches ``lookup`` (``pk=…``), within ``project`` when given; ``Http404("No such <noun>.")`` otherwise, the noun
    being the model's verbose name unless given."""
    if project is not None:
        scoped = scoped.filter(project=project)
    found = scoped.filter(**lookup).first()
    if found is None:
        raise Http404(f"No such {noun or scoped.model._meta.verbose_name}.")
    return found
