"""Every failure under /api/ is the JSON error envelope with a stable code — including the multipart parser's
refusals, unknown URLs with DEBUG on, NUL bytes in the path or a parameter — and no parser error leaves a ``.part``
file in ``artifacts/incoming/`` (core/api_errors.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit_portal.runs.models import Upload

from ..conftest import as_file, gz, jsonl, records, upload_url

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
    body = b'--b\r\nContent-Disposition: form-data; name="file"; filename="r.jsonl"\r\n\r\n{}'  # never closed
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


# ----------------------------------------------------------------------------- JSON request bodies (core/parsers.py)
def _json_operations(project, owner):
    """Every operation that reads a JSON body: (method, url, a valid body, its request serializer's fields)."""
    from audit_portal.alerts import api as alerts_api
    from audit_portal.alerts.services import create_rule
    from audit_portal.kernels import api as kernels_api
    from audit_portal.training import api as training_api

    rule = create_rule(project=project, data={"name": "r", "kind": "budget", "threshold": 1.0}, created_by="t")
    slug = project.slug
    return [
        (
            "post",
            f"/api/v1/projects/{slug}/alert-rules/",
            {"name": "r", "kind": "budget", "threshold": 1.0},
            alerts_api.RULE_REQUEST.fields,
        ),
        ("patch", f"/api/v1/alert-rules/{rule.pk}/", {"name": "r2"}, alerts_api.RULE_CHANGE.fields),
        (
            "post",
            f"/api/v1/projects/{slug}/kernel-submissions/",
            {"impl": "workers.contracts.reference"},
            kernels_api.SUBMISSION_REQUEST.fields,
        ),
        ("post", f"/api/v1/projects/{slug}/training-audits/", {"numerics": "fp32"}, training_api.SUBMIT_REQUEST.fields),
    ]


def _send_json(api, method, url, body: bytes):
    from django.core.cache import cache

    cache.clear()  # the work budget (UPLOAD_THROTTLE_RATE): every request reaches the view, never a 429
    response = getattr(api, method)(url, body, content_type="application/json")
    assert response.status_code != 429
    return response


def test_a_deeply_nested_json_body_is_a_400_naming_the_limit_on_every_json_operation(api, project, owner):
    from audit_portal.core.parsers import MAX_JSON_DEPTH

    deep = b"[" * 200_000 + b"]" * 200_000  # json's recursive decoder raised RecursionError on this: a 500
    for method, url, body, _ in _json_operations(project, owner):
        error = envelope(_send_json(api, method, url, deep), 400, "json_too_deep")
        assert f"limit is {MAX_JSON_DEPTH}" in error["message"] and error["detail"]["limit"] == MAX_JSON_DEPTH
        inside = b'{"name": ' + b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1) + b"}"
        assert (
            envelope(_send_json(api, method, url, inside), 400, "json_too_deep")["detail"]["depth"]
            == MAX_JSON_DEPTH + 2
        )
        # brackets inside strings are text, not nesting: the field's own check answers (a 4xx that is not the depth)
        text = json.dumps({**body, "name": "[" * 5000}).encode()
        response = _send_json(api, method, url, text)
        assert response.status_code < 500 and response.json().get("error", {}).get("code") != "json_too_deep"


def test_json_depth_counts_structure_not_text():
    from audit_portal.core.parsers import json_depth

    assert json_depth(b"1") == 0 and json_depth(b"{}") == 1 and json_depth(b'{"a": [1, {"b": []}]}') == 4
    assert json_depth(b'{"a": "[[[{{{"}') == 1 and json_depth(b'["]]]", [[]]]') == 3
    assert json_depth(rb'{"a": "\"[[[", "b": [[1]]}') == 3  # an escaped quote does not end the string
    assert json_depth(rb'{"a": "\\", "b": [[1]]}') == 3  # an escaped backslash does not escape the quote
    assert json_depth(rb'{"a": "\\\"[[[", "b": []}') == 2
    assert json_depth(b"[" * 10_000 + b"]" * 10_000) == 10_000
    assert json_depth(b'"' + b'\\"' * 500_000) == 0  # no quadratic scan of an unterminated string


def test_a_json_body_over_the_size_limit_is_a_413(api, project, owner, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"name": "x" * 2000, "kind": "budget", "threshold": 1}).encode()
    error = envelope(
        api.post(f"/api/v1/projects/{project.slug}/alert-rules/", body, content_type="application/json"),
        413,
        "request_too_large",
    )
    assert "1000 bytes" in error["message"] or "DATA_UPLOAD_MAX_MEMORY_SIZE" in error["message"]


@pytest.mark.parametrize(
    "bad",
    [[None, None], {"a": {"b": [1]}}, True, 1e308, -1, "x" * 3000, "\x00", None],
    ids=["list", "object", "bool", "huge", "negative", "long", "nul", "null"],
)
def test_a_value_of_the_wrong_type_in_any_json_field_is_a_4xx_not_a_500(api, project, owner, bad):
    for method, url, body, fields in _json_operations(project, owner):
        for field in fields:
            response = _send_json(api, method, url, json.dumps({**body, field: bad}).encode())
            assert response.status_code < 500, (url, field, bad, response.content[:300])
            assert response["Content-Type"].startswith("application/json"), (url, field)


def test_the_webhook_url_as_a_list_is_a_400_naming_the_field(api, project):
    url = f"/api/v1/projects/{project.slug}/alert-rules/"
    error = envelope(
        api.post(url, {"name": "r", "kind": "budget", "threshold": 1, "webhook_url": [None, None]}, format="json"),
        400,
        "invalid_alert_rule",
    )
    assert error["detail"]["field"] == "webhook_url"
    error = envelope(
        api.post(url, {"name": "r", "kind": ["budget"], "threshold": 1}, format="json"), 400, "invalid_alert_rule"
    )
    assert error["detail"]["field"] == "kind"


def test_a_multipart_body_without_a_boundary_and_a_wrong_method_are_json(api, project):
    from django.core.cache import cache

    cache.clear()
    error = envelope(
        api.generic("POST", upload_url(project), b"--x\r\n\r\n", content_type="multipart/form-data"),
        400,
        "malformed_request",
    )
    assert "boundary" in error["message"].lower()
    envelope(api.put(upload_url(project), {}, format="json"), 405, "method_not_allowed")
