"""Every failure under /api/ is the JSON error envelope with a stable code — including the multipart parser's
refusals, unknown URLs with DEBUG on, NUL bytes in the path or a parameter — and no parser error leaves a ``.part``
file in ``artifacts/incoming/`` (core/api_errors.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from audit_portal.runs.models import Upload

from .conftest import as_file, gz, jsonl, records, upload_url

pytestmark = pytest.mark.django_db


def incoming(settings) -> list[Path]:
    folder = Path(settings.ARTIFACT_ROOT) / "incoming"
    return sorted(folder.iterdir()) if folder.exists() else []


def envelope(response, status, code):
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    return error


def test_three_hundred_files_are_refused_as_json_and_leave_no_part_file(api, project, settings):
    data = gz(jsonl(records(trajectories=1)))
    files = [as_file(data, f"r{i}.jsonl.gz") for i in range(300)]
    response = api.post(upload_url(project), {"file": files}, format="multipart")
    envelope(response, 400, "too_many_files")
    assert incoming(settings) == [] and Upload.objects.count() == 0


def test_too_many_fields_and_a_malformed_body_are_json(api, project, settings):
    fields = {f"f{i}": "x" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1)}
    envelope(api.post(upload_url(project), fields, format="multipart"), 400, "too_many_fields")
    body = b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"r.jsonl\"\r\n\r\n{}"  # never closed
    response = api.generic("POST", upload_url(project), body, content_type="multipart/form-data; boundary=b")
    assert response.status_code == 400 and response["Content-Type"].startswith("application/json")
    assert incoming(settings) == []


def test_a_page_upload_that_fails_in_the_parser_leaves_no_part_file(client, owner, project, settings):
    client.force_login(owner)
    data = jsonl(records(trajectories=1))
    response = client.post(f"/p/{project.slug}/uploads/", {"file": [as_file(data, f"r{i}.jsonl") for i in range(150)]})
    assert response.status_code < 500 and incoming(settings) == []


@pytest.mark.parametrize("url", ["/api/v1/no-such-thing/", "/api/nothing", "/api/v1/projects/x/uploads/9/"])
def test_unknown_urls_are_json_even_with_debug_on(api, settings, url):
    settings.DEBUG = True  # Django's technical 404 page is HTML
    envelope(api.get(url), 404, "not_found")


def test_a_nul_byte_in_a_parameter_or_the_path_is_a_400_naming_it(api, project):
    error = envelope(api.get(upload_url(project) + "?stage=%00"), 400, "invalid_parameter")
    assert "'stage'" in error["message"] and "NUL" in error["message"]
    envelope(api.get(upload_url(project) + "?stage=valid%00x&page_size=2"), 400, "invalid_parameter")
    envelope(api.get("/api/v1/projects/a%00b/uploads/"), 400, "invalid_parameter")
    assert api.get(upload_url(project) + "?stage=valid").status_code == 200  # the same parameter without it
