"""Saved views of the runs table: a user saves the table's query under a name (POST-redirect-GET), sees their views
as links above the table, a link reproduces the query, deletes their own (with a confirmation); other users' views
are neither listed nor deletable, and another project's are not found."""

from __future__ import annotations

import html as htmllib
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.messages import get_messages

from audit_portal.accounts.models import Role
from audit_portal.dashboards.models import SavedView

from .test_runs_columns import declared, headers, names

pytestmark = pytest.mark.django_db

QUERY = "q=sweep&verdict=&sort=-name&cols=status&cols=params.lr&min_eps_hat=0.002&page=2&format=csv&evil=1"


def view_links(html: str) -> dict[str, str]:
    block = re.search(r'<ul class="saved-view-list".*?</ul>', html, re.S)
    if not block:
        return {}
    return {
        htmllib.unescape(name): htmllib.unescape(href)
        for href, name in re.findall(r'<a href="([^"]+)">([^<]+)</a>', block.group(0))
    }


def test_save_lists_and_applies_the_query(client, owner, project):
    declared(project)
    client.force_login(owner)
    response = client.post(f"/p/{project.slug}/runs/views/", {"name": "  lr  sweep ", "query": QUERY})
    assert response.status_code == 302  # POST-redirect-GET: to the table with the saved query
    location = urlsplit(response["Location"])
    assert location.path == f"/p/{project.slug}/runs/"
    saved = parse_qs(location.query)
    # only the table's keys, no page, export format, empty values or unknown keys
    assert saved == {"q": ["sweep"], "sort": ["-name"], "cols": ["status", "params.lr"], "min_eps_hat": ["0.002"]}
    view = SavedView.objects.get()
    assert (view.name, view.owner, view.project) == ("lr sweep", owner, project)

    page = client.get(f"/p/{project.slug}/runs/").content.decode()
    links = view_links(page)
    assert list(links) == ["lr sweep"]
    applied = client.get(links["lr sweep"]).content.decode()
    direct = client.get(f"/p/{project.slug}/runs/", saved).content.decode()
    assert headers(applied) == ["name", "status", "params.lr"] == headers(direct)
    assert names(applied) == names(direct) == ["sweep-02", "sweep-01"]  # eps_hat >= 0.002, by name descending
    # saving under the same name replaces the query, not a second view
    client.post(f"/p/{project.slug}/runs/views/", {"name": "lr sweep", "query": "sort=name"})
    assert list(SavedView.objects.values_list("name", "query")) == [("lr sweep", "sort=name")]


def test_a_bad_query_or_no_name_is_refused_in_words(client, owner, project):
    client.force_login(owner)
    response = client.post(f"/p/{project.slug}/runs/views/", {"name": "x", "query": "cols=nonsense"}, follow=True)
    assert "View not saved" in response.content.decode() and "nonsense" in response.content.decode()
    response = client.post(f"/p/{project.slug}/runs/views/", {"name": " ", "query": "sort=name"}, follow=True)
    assert "give the view a name" in response.content.decode()
    assert not SavedView.objects.exists()


def test_delete_own_view_with_confirmation(client, owner, project):
    client.force_login(owner)
    client.post(f"/p/{project.slug}/runs/views/", {"name": "mine", "query": "sort=name"})
    view = SavedView.objects.get()
    page = client.get(f"/p/{project.slug}/runs/").content.decode()
    form = re.search(rf'<form[^>]*action="/p/{project.slug}/runs/views/{view.pk}/delete/"[^>]*>', page).group(0)
    assert 'method="post"' in form and "data-confirm=" in form
    assert client.get(f"/p/{project.slug}/runs/views/{view.pk}/delete/").status_code == 405
    response = client.post(f"/p/{project.slug}/runs/views/{view.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == f"/p/{project.slug}/runs/"
    assert not SavedView.objects.exists()
    assert "saved-views-empty" in client.get(f"/p/{project.slug}/runs/").content.decode()


def test_views_are_per_user_and_per_project(client, owner, project, other_project, member_of):
    viewer = member_of(project, Role.VIEWER)
    client.force_login(owner)
    client.post(f"/p/{project.slug}/runs/views/", {"name": "owner's", "query": "sort=name"})
    owners = SavedView.objects.get()
    client.force_login(viewer)  # a viewer may save views for themselves
    assert client.post(f"/p/{project.slug}/runs/views/", {"name": "viewer's", "query": "sort=-name"}).status_code == 302
    page = client.get(f"/p/{project.slug}/runs/").content.decode()
    assert list(view_links(page)) == ["viewer's"]
    response = client.post(f"/p/{project.slug}/runs/views/{owners.pk}/delete/")
    assert response.status_code == 302
    assert any("only the views you saved" in str(m) for m in get_messages(response.wsgi_request))
    assert SavedView.objects.filter(pk=owners.pk).exists()
    client.force_login(owner)
    assert list(view_links(client.get(f"/p/{project.slug}/runs/").content.decode())) == ["owner's"]
    # another project: not found, for saving and for deleting (its own id or this project's)
    assert client.post(f"/p/{other_project.slug}/runs/views/", {"name": "x", "query": ""}).status_code == 404
    assert client.post(f"/p/{other_project.slug}/runs/views/{owners.pk}/delete/").status_code == 404
    theirs = SavedView.objects.create(project=other_project, owner=other_project.memberships.first().user, name="t")
    assert client.post(f"/p/{project.slug}/runs/views/{theirs.pk}/delete/").status_code == 404
    assert SavedView.objects.count() == 3
