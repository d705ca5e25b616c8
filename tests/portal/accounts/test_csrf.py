"""CSRF: every POST form carries the token; a form POST without it is refused (403); session-authenticated API
writes need it too (DRF's SessionAuthentication); requests authenticated by an API key (Bearer) are exempt — a
browser never sends that header on its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from audit_portal.accounts.models import ApiKey
from audit_portal.accounts.services import issue_api_key
from audit_portal.runs.models import Upload

from ..conftest import as_file, jsonl, records, upload_url

pytestmark = pytest.mark.django_db

TEMPLATES = Path(__file__).resolve().parents[3] / "templates"
POST_FORM = re.compile(r"<form\b[^>]*\bmethod=[\"']?post[\"']?[^>]*>(.*?)</form>", re.I | re.S)
TOKEN_INPUT = re.compile(r'<input type="hidden" name="csrfmiddlewaretoken" value="[A-Za-z0-9]{64}">')


def test_every_post_form_in_the_templates_has_the_csrf_token():
    forms = 0
    missing = []
    for path in sorted(TEMPLATES.rglob("*.html")):
        for body in POST_FORM.findall(path.read_text()):
            forms += 1
            if "{% csrf_token %}" not in body:
                missing.append(f"{path.relative_to(TEMPLATES)}: <form method=post> without {{% csrf_token %}}")
    assert forms >= 5  # login, sign out, key create, key revoke, tokenizer upload, kernel submit
    assert not missing, "\n".join(missing)


@pytest.fixture
def csrf_client():
    return Client(enforce_csrf_checks=True)


def _rendered_forms(response) -> list[str]:
    assert response.status_code == 200
    return POST_FORM.findall(response.content.decode())


def test_rendered_pages_put_the_token_in_every_post_form(csrf_client, project, owner):
    assert all(TOKEN_INPUT.search(f) for f in _rendered_forms(csrf_client.get("/login/")))
    csrf_client.force_login(owner)
    issue_api_key(project=project, name="ci", scopes=["read"])  # so the keys page has a revoke form too
    pages = {
        f"/p/{project.slug}/": 1,  # sign out
        f"/p/{project.slug}/keys/": 3,  # sign out, create, revoke
        f"/p/{project.slug}/fidelity/tokenizers/": 2,
        f"/p/{project.slug}/kernels/submit/": 2,
    }
    for url, count in pages.items():
        forms = _rendered_forms(csrf_client.get(url))
        assert len(forms) == count, (url, len(forms))
        for form in forms:
            assert TOKEN_INPUT.search(form), f"{url}: a POST form without csrfmiddlewaretoken"


def test_form_posts_without_the_token_are_refused(csrf_client, project, owner):
    key = issue_api_key(project=project, name="victim", scopes=["read"]).key
    assert csrf_client.post("/login/", {"username": "olivia", "password": "pw-olivia-123"}).status_code == 403
    csrf_client.force_login(owner)
    for url, data in [
        (f"/p/{project.slug}/keys/", {"name": "evil", "scopes": ["read", "submit"]}),
        (f"/p/{project.slug}/keys/{key.pk}/revoke/", {}),
        (f"/p/{project.slug}/fidelity/tokenizers/", {"file": as_file(b'{"0": "a"}', "t.json")}),
        (f"/p/{project.slug}/kernels/submit/", {"source": "import", "impl": "pkg.evil"}),
        ("/logout/", {}),
    ]:
        response = csrf_client.post(url, data)
        assert response.status_code == 403, url
        assert b"CSRF" in response.content, url
    key.refresh_from_db()
    assert key.revoked_at is None and not ApiKey.objects.filter(name="evil").exists()
    assert csrf_client.get(f"/p/{project.slug}/").status_code == 200  # still signed in: logout was refused


def test_form_posts_with_the_token_are_accepted(csrf_client, project, owner):
    csrf_client.force_login(owner)
    csrf_client.get(f"/p/{project.slug}/keys/")
    token = csrf_client.cookies["csrftoken"].value
    response = csrf_client.post(
        f"/p/{project.slug}/keys/", {"name": "ok", "scopes": ["read"], "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302 and ApiKey.objects.filter(name="ok").exists()


def test_session_authenticated_api_writes_need_the_csrf_token(csrf_client, project, owner):
    csrf_client.force_login(owner)
    url = f"/api/v1/projects/{project.slug}/api-keys/"
    refused = csrf_client.post(url, {"name": "evil", "scopes": ["read"]}, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]
    upload = csrf_client.post(upload_url(project), {"file": as_file(jsonl(records()))})
    assert upload.status_code == 403 and Upload.objects.count() == 0
    assert not ApiKey.objects.filter(name="evil").exists()
    # reads need no token; a write with the token (as static/js/upload.js sends it) goes through
    assert csrf_client.get(url).status_code == 200
    csrf_client.get(f"/p/{project.slug}/uploads/")  # a page with a form sets the CSRF cookie
    token = csrf_client.cookies["csrftoken"].value
    accepted = csrf_client.post(
        url, {"name": "ok", "scopes": ["read"]}, content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert accepted.status_code == 201


def test_api_key_requests_are_csrf_exempt(csrf_client, project, submit_token):
    response = csrf_client.post(
        upload_url(project), {"file": as_file(jsonl(records()))}, HTTP_AUTHORIZATION=f"Bearer {submit_token}"
    )
    assert response.status_code == 201
    assert "csrftoken" not in response.cookies  # no session, no CSRF cookie handed to a CI client
