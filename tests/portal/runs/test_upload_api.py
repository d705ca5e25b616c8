"""Uploads over the API: stored by digest, idempotent, and every kind of bad input refused cleanly."""

import hashlib

import pytest

from audit_portal.jobs.models import Job
from audit_portal.runs.models import Upload, UploadStage

from ..conftest import as_file, gz, jsonl, records, stored_files, upload_url

pytestmark = pytest.mark.django_db


def test_upload_is_stored_under_its_digest_and_queues_validation(api, project, settings):
    data = gz(jsonl(records()))
    response = api.post(upload_url(project), {"file": as_file(data, "run.jsonl.gz")}, format="multipart")
    assert response.status_code == 201, response.content
    body = response.json()
    digest = hashlib.sha256(data).hexdigest()
    assert body["sha256"] == digest and body["size_bytes"] == len(data) and body["compression"] == "gzip"
    assert body["stage"] == UploadStage.RECEIVED
    [stored] = stored_files(settings)
    assert stored.read_bytes() == data and digest in stored.name
    job = Job.objects.get(subject_kind="upload", subject_id=body["id"])
    assert job.kind == "validate_upload" and job.state == "queued" and job.queue == "cpu"


def test_same_bytes_twice_return_the_first_upload(api, project, settings):
    data = jsonl(records())
    first = api.post(upload_url(project), {"file": as_file(data)}, format="multipart")
    second = api.post(upload_url(project), {"file": as_file(data, "again.jsonl")}, format="multipart")
    assert first.status_code == 201 and second.status_code == 200
    assert second.json()["id"] == first.json()["id"] and second["X-Duplicate-Upload"] == "true"
    dup = Upload.objects.get(stage=UploadStage.DUPLICATE)
    assert dup.duplicate_of_id == first.json()["id"] and dup.original_name == "again.jsonl"
    assert len(stored_files(settings)) == 1
    assert Job.objects.count() == 1  # the duplicate queues nothing


def _assert_nothing_stored(settings):
    assert Upload.objects.count() == 0 and Job.objects.count() == 0
    assert stored_files(settings) == []


def test_malformed_line_is_refused_with_its_line_number(api, project, settings):
    lines = jsonl(records()).split(b"\n")
    lines[2] = lines[2][: len(lines[2]) // 2]  # cut a record in half
    response = api.post(upload_url(project), {"file": as_file(b"\n".join(lines))}, format="multipart")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_run_log" and error["message"].startswith("line 3")
    assert error["detail"]["errors"][0]["line"] == 3
    _assert_nothing_stored(settings)


def test_misaligned_arrays_are_refused_naming_the_field(api, project, settings):
    recs = records()
    recs[1]["trainer"]["logprobs"] = recs[1]["trainer"]["logprobs"][:-1]
    response = api.post(upload_url(project), {"file": as_file(jsonl(recs))}, format="multipart")
    assert response.status_code == 400
    first = response.json()["error"]["detail"]["errors"][0]
    assert first["line"] == 2 and first["field"].startswith("trainer.logprobs")
    _assert_nothing_stored(settings)


def test_truncated_gzip_is_refused(api, project, settings):
    data = gz(jsonl(records()))
    response = api.post(
        upload_url(project), {"file": as_file(data[: len(data) - 40], "run.jsonl.gz")}, format="multipart"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "corrupt_compression"
    assert "truncated" in response.json()["error"]["message"]
    _assert_nothing_stored(settings)


def test_a_file_that_is_not_jsonl_is_refused(api, project, settings):
    png = b"\x89PNG\r\n\x1a\n" + bytes(200)
    response = api.post(upload_url(project), {"file": as_file(png, "plot.png")}, format="multipart")
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_upload_format"
    _assert_nothing_stored(settings)


def test_wrong_content_type_is_refused(api, project, settings):
    response = api.post(upload_url(project), data=jsonl(records()), content_type="application/json")
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    _assert_nothing_stored(settings)


def test_missing_file_field_is_refused(api, project, settings):
    response = api.post(upload_url(project), {"other": as_file(jsonl(records()))}, format="multipart")
    assert response.status_code == 400 and response.json()["error"]["code"] == "file_missing"
    _assert_nothing_stored(settings)


def test_oversize_file_is_refused_while_streaming(api, project, settings):
    settings.UPLOAD_MAX_BYTES = 3000
    data = jsonl(records())
    assert len(data) > 3000
    response = api.post(upload_url(project), {"file": as_file(data)}, format="multipart")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "upload_too_large"
    _assert_nothing_stored(settings)


def test_oversize_declared_length_is_refused_before_reading(api, project, settings):
    settings.UPLOAD_MAX_BYTES = 10
    response = api.post(upload_url(project), {"file": as_file(b"{}\n" * 40000)}, format="multipart")
    assert response.status_code == 413
    _assert_nothing_stored(settings)


def test_empty_file_is_refused(api, project, settings):
    response = api.post(upload_url(project), {"file": as_file(b"")}, format="multipart")
    assert response.status_code == 400 and response.json()["error"]["code"] == "empty_upload"
    _assert_nothing_stored(settings)


def test_missing_and_bad_tokens_are_refused(client, project, settings):
    data = jsonl(records())
    missing = client.post(upload_url(project), {"file": as_file(data)})
    assert missing.status_code in (401, 403) and missing.json()["error"]["code"] == "not_authenticated"
    bad = client.post(upload_url(project), {"file": as_file(data)}, HTTP_AUTHORIZATION="Bearer ap_dead_beef")
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "authentication_failed"
    _assert_nothing_stored(settings)


def test_earlier_uploads_survive_a_refused_one(api, project, settings):
    good = api.post(upload_url(project), {"file": as_file(jsonl(records()))}, format="multipart")
    assert good.status_code == 201
    api.post(upload_url(project), {"file": as_file(b"{not json\n")}, format="multipart")
    assert list(Upload.objects.values_list("pk", flat=True)) == [good.json()["id"]]
    assert len(stored_files(settings)) == 1


def test_uploads_are_throttled_per_key(api, project, settings):
    from django.core.cache import cache

    settings.UPLOAD_THROTTLE_RATE = "2/min"
    cache.clear()
    responses = [
        api.post(upload_url(project), {"file": as_file(jsonl(records(seed=s)))}, format="multipart") for s in range(3)
    ]
    assert [r.status_code for r in responses] == [201, 201, 429]
    assert responses[2].json()["error"]["code"] == "throttled"
    assert responses[2].json()["error"]["retry_after_seconds"] > 0
    assert Upload.objects.count() == 2
    cache.clear()


def test_upload_list_is_cursor_paginated(api, project):
    for s in range(3):
        api.post(upload_url(project), {"file": as_file(jsonl(records(seed=s)))}, format="multipart")
    page = api.get(upload_url(project) + "?page_size=2").json()
    assert len(page["results"]) == 2 and page["next"] and "cursor=" in page["next"]
    rest = api.get(page["next"]).json()
    assert len(rest["results"]) == 1
    ids = [u["id"] for u in page["results"] + rest["results"]]
    assert ids == sorted(ids, reverse=True)
