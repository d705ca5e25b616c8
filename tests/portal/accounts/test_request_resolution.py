"""Each request resolves its caller once and its project once (audit_portal/accounts/permissions.py for the API,
the page decorators of audit_portal/core/pages.py for pages), and a project the caller may not read is answered
exactly like one that does not exist."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from audit_portal.accounts.principal import Principal

from ..conftest import upload_url
from ..core.test_query_counts import make_submissions, make_uploads

pytestmark = pytest.mark.django_db

PROJECT_BY_SLUG = '"accounts_project"."slug" ='


@pytest.fixture
def resolutions(monkeypatch):
    """The paths for which ``Principal.from_request`` ran, one entry per call."""
    calls = []
    resolve = Principal.from_request.__func__

    def counted(cls, request):
        calls.append(request.path)
        return resolve(cls, request)

    monkeypatch.setattr(Principal, "from_request", classmethod(counted))
    return calls


def without_clock_and_token(page: bytes) -> bytes:
    """A page without the server's clock and the masked CSRF token: the parts that differ from one answer to the
    next whatever was asked."""
    page = re.sub(rb'data-server-now="[^"]*"', b"", page)
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]*"', b"", page)


def get_counting_project_lookups(client, url):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    return response, sum(PROJECT_BY_SLUG in q["sql"] for q in queries.captured_queries)


@pytest.mark.parametrize(
    "make, path",
    [
        (make_uploads, "uploads"),
        (make_uploads, "jobs"),
        (make_uploads, "runs"),
        (make_submissions, "kernel-submissions"),
    ],
)
def test_an_api_list_with_a_key_resolves_the_caller_and_the_project_once(api, project, resolutions, make, path):
    make(project, 3)
    url = f"/api/v1/projects/{project.slug}/{path}/"
    response, project_lookups = get_counting_project_lookups(api, url)
    assert response.status_code == 200, response.content
    assert len(response.json()["results"]) >= 3
    assert resolutions == [url]
    assert project_lookups == 1


def test_an_api_list_in_a_session_resolves_the_caller_and_the_project_once(owner, project, resolutions):
    make_uploads(project, 3)
    client = APIClient()
    client.force_login(owner)
    response, project_lookups = get_counting_project_lookups(client, upload_url(project))
    assert response.status_code == 200 and len(response.json()["results"]) == 3
    assert len(resolutions) == 1 and project_lookups == 1


def test_a_project_page_resolves_the_caller_and_the_project_once(client, owner, project, resolutions):
    make_uploads(project, 3)
    client.force_login(owner)
    response, project_lookups = get_counting_project_lookups(client, f"/p/{project.slug}/uploads/")
    assert response.status_code == 200 and b"r0.jsonl" in response.content
    assert len(resolutions) == 1 and project_lookups == 1


def test_a_project_the_caller_may_not_read_is_answered_like_one_that_does_not_exist(api, other_project, client, owner):
    hidden = api.get(upload_url(other_project))
    missing = api.get("/api/v1/projects/no-such-project/uploads/")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json() == missing.json()
    client.force_login(owner)
    hidden_page = client.get(f"/p/{other_project.slug}/runs/")
    missing_page = client.get("/p/no-such-project/runs/")
    assert hidden_page.status_code == missing_page.status_code == 404
    assert without_clock_and_token(hidden_page.content) == without_clock_and_token(missing_page.content)


def test_an_object_of_another_project_is_not_found_through_this_projects_address(client, owner, project, other_project):
    from audit_portal.runs.models import Run

    theirs = Run.objects.create(project=other_project, name="theirs")
    mine = Run.objects.create(project=project, name="mine")
    other_project.memberships.create(user=owner, role="member")  # the caller may read both projects
    client.force_login(owner)
    assert client.get(f"/p/{other_project.slug}/runs/{theirs.pk}/").status_code == 200
    assert client.get(f"/p/{project.slug}/runs/{theirs.pk}/").status_code == 404
    assert client.get(f"/p/{project.slug}/runs/{mine.pk}/").status_code == 200
