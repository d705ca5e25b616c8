"""Public badge URLs for READMEs: published by a member (API or page), fetched by anyone without signing in, showing
only the latest submission's state and grade; a new URL retires the old one; unpublishing makes it 404; readers
see the URL, viewers and read keys cannot publish; an unknown token is a 404."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from audit_portal.accounts.models import Role
from audit_portal.accounts.services import issue_api_key

from .test_kernels_results import ALL_PASS, make_submission, suite  # noqa: F401  (autouse: the contract suite)

pytestmark = pytest.mark.django_db


def url(implementation_id):
    return f"/api/v1/implementations/{implementation_id}/public-badge/"


def public_path(body):
    return body["url"].split("testserver", 1)[1]


def test_publish_fetch_anonymously_renew_and_unpublish(api, project):
    failing = make_submission(project, "vendor.kernels", {**ALL_PASS, "C-PRC-01": "FAIL"})
    implementation = failing.implementation_id
    assert api.get(url(implementation)).json() == {"published": False, "url": None, "markdown": None}
    published = api.post(url(implementation))
    assert published.status_code == 201
    body = published.json()
    assert body["published"] and body["url"].startswith("http://testserver/badges/kernels/")
    assert body["markdown"] == f"![kernel contracts]({body['url']})"
    path = public_path(body)
    assert len(path.rsplit("/", 1)[1].removesuffix(".svg")) >= 32  # an unguessable token, not an id

    anonymous = APIClient()
    badge = anonymous.get(path)
    assert badge.status_code == 200 and badge["Content-Type"] == "image/svg+xml"
    svg = badge.content.decode()
    assert "#c0392b" in svg and "5/6 pass" in svg  # the failing latest submission, graded
    assert "/p/" not in svg and "submission" not in svg and project.slug not in svg and "vendor.kernels" not in svg
    make_submission(project, "vendor.kernels", ALL_PASS)  # the badge follows the latest result
    assert "#2e8540" in anonymous.get(path).content.decode()

    renewed = public_path(api.post(url(implementation)).json())
    assert renewed != path
    assert anonymous.get(path).status_code == 404 and anonymous.get(renewed).status_code == 200
    assert api.delete(url(implementation)).status_code == 204
    assert anonymous.get(renewed).status_code == 404
    assert api.get(url(implementation)).json()["published"] is False


def test_unknown_token_and_bad_device_are_handled(api, project):
    make_submission(project, "vendor.kernels", ALL_PASS)
    assert APIClient().get("/badges/kernels/not-a-token.svg").status_code == 404
    implementation = make_submission(project, "other.kernels", ALL_PASS).implementation_id
    path = public_path(api.post(url(implementation)).json())
    no_cuda = APIClient().get(path + "?device=cuda")  # nothing submitted on that platform
    assert no_cuda.status_code == 200 and "no result" in no_cuda.content.decode()


def test_viewers_and_read_keys_see_but_cannot_publish(project, owner, member_of, client):
    implementation = make_submission(project, "vendor.kernels", ALL_PASS).implementation_id
    reader = APIClient()
    reader.credentials(
        HTTP_AUTHORIZATION="Bearer "
        + issue_api_key(project=project, name="ro", scopes=["read"], created_by=owner).token
    )
    assert reader.post(url(implementation)).status_code == 403
    assert reader.get(url(implementation)).status_code == 200
    client.force_login(member_of(project, Role.VIEWER))
    refused = client.post(f"/p/{project.slug}/kernels/implementations/{implementation}/badge/", {"action": "publish"})
    assert refused.status_code == 302 and refused["Location"] == f"/p/{project.slug}/kernels/"
    assert reader.get(url(implementation)).json()["published"] is False


def test_member_publishes_from_the_submission_page(project, member_of, client):
    submission = make_submission(project, "vendor.kernels", ALL_PASS)
    client.force_login(member_of(project, Role.MEMBER))
    page = client.get(f"/p/{project.slug}/kernels/submissions/{submission.pk}/").content.decode()
    assert 'id="badge-unpublished"' in page and 'id="publish-badge"' in page
    done = client.post(
        f"/p/{project.slug}/kernels/implementations/{submission.implementation_id}/badge/",
        {"action": "publish"},
        follow=True,
    )
    html = done.content.decode()
    assert done.redirect_chain[-1][0].endswith(f"/kernels/submissions/{submission.pk}/#public-badge")
    assert 'id="badge-markdown">![kernel contracts](http://testserver/badges/kernels/' in html
    assert "Public badge URL created" in html
    src = re.search(r'src="http://testserver(/badges/kernels/[^"?]+\.svg)\?device=cpu" id="public-badge-img"', html)
    assert src and APIClient().get(src.group(1)).status_code == 200
