"""Pages render for members, the OpenAPI schema describes the API, and the web tier stays torch-free."""

import re
import subprocess
import sys

import pytest

from audit_portal.accounts.models import Role

pytestmark = pytest.mark.django_db


def test_pages_need_sign_in(client, project):
    response = client.get(f"/p/{project.slug}/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_member_pages_render(client, project, member_of, api):
    from ..conftest import as_file, jsonl, records, upload_url

    body = api.post(upload_url(project), {"file": as_file(jsonl(records()))}, format="multipart").json()
    client.force_login(member_of(project, Role.MEMBER))
    for url in [
        f"/p/{project.slug}/",
        f"/p/{project.slug}/uploads/",
        f"/p/{project.slug}/uploads/{body['id']}/",
        f"/jobs/{body['jobs'][0]['id']}/",
    ]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert b"run.jsonl" in response.content or b"Validate" in response.content
    assert b'id="dropzone"' in client.get(f"/p/{project.slug}/uploads/").content


def test_viewer_sees_no_upload_form_and_non_owner_no_key_page(client, project, member_of):
    client.force_login(member_of(project, Role.VIEWER))
    assert b'id="dropzone"' not in client.get(f"/p/{project.slug}/uploads/").content
    assert client.get(f"/p/{project.slug}/keys/").status_code == 302


def test_owner_creates_a_key_in_the_browser_and_sees_it_once(client, project, owner):
    client.force_login(owner)
    response = client.post(f"/p/{project.slug}/keys/", {"name": "ci-main", "scopes": ["read", "submit"]}, follow=True)
    assert response.status_code == 200 and response.redirect_chain == [(f"/p/{project.slug}/keys/", 302)]
    token = response.context["new_token"]
    assert token.encode() in response.content
    assert token.encode() not in client.get(f"/p/{project.slug}/keys/").content


def test_openapi_schema_describes_the_api(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    for path in ["/api/v1/projects/{slug}/uploads/", "/api/v1/jobs/{id}/", "/api/v1/uploads/{id}/"]:
        assert path in schema["paths"], path
    assert (
        "multipart/form-data" in schema["paths"]["/api/v1/projects/{slug}/uploads/"]["post"]["requestBody"]["content"]
    )


def test_api_docs_are_served_without_a_cdn(client):
    html = client.get("/api/docs/").content.decode()
    assert "swagger" in html.lower()
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html


def test_run_page_ships_plotlys_partial_bundle_from_static_deferred(api, client, project, owner):
    from ..conftest import records
    from ..certificates.test_certificates import certified

    certificate, _ = certified(api, project, records(trajectories=4))
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/{certificate.run_id}/").content.decode()
    assert re.search(r'<script src="/static/vendor/plotly-basic\.min(\.[0-9a-f]{12})?\.js" defer>', html)
    assert "plotly.min.js" not in html and "cdn.plot.ly" not in html
    bare = client.get(f"/p/{project.slug}/runs/{certificate.run_id}/", {"certificate": "0"}).content.decode()
    assert "plotly-basic" in bare  # an unknown certificate id falls back to the latest one


def test_the_web_process_never_imports_torch():
    code = (
        "import django, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE','audit_portal.settings');"
        "django.setup(); import audit_portal.asgi, audit_portal.urls, audit_portal.api_urls;"
        "from django.urls import resolve; resolve('/api/v1/projects/');"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
