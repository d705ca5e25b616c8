"""Resumable uploads in parts (audit_portal/runs/chunked.py): parts in any order and any number of times, resume
after an interruption from what the server says it has, a digest checked at completion, and the same intake as a
single-request upload (stored bytes, validation job, duplicates)."""

from __future__ import annotations

import hashlib

import pytest

from audit_portal.jobs.models import Job
from audit_portal.runs import chunked
from audit_portal.runs.models import Upload, UploadSession

from ..conftest import as_file, jsonl, records, upload_url

pytestmark = pytest.mark.django_db
PART = 4096


@pytest.fixture(autouse=True)
def small_parts(monkeypatch):
    monkeypatch.setattr(chunked, "PART_BYTES", PART)


@pytest.fixture
def log_bytes() -> bytes:
    data = jsonl(records(trajectories=6))
    assert len(data) > 5 * PART
    return data


def start(api, project, data: bytes, sha: str | None = None, *, declare: bool = True) -> dict:
    body = {"size": len(data), "name": "run.jsonl"}
    if declare:
        body["sha256"] = sha or hashlib.sha256(data).hexdigest()
    response = api.post(f"/api/v1/projects/{project.slug}/upload-sessions/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def put(api, session: dict, n: int, data: bytes, **headers):
    part = data[n * PART : (n + 1) * PART]
    return api.generic(
        "PUT",
        f"/api/v1/upload-sessions/{session['id']}/parts/{n}/",
        part,
        content_type="application/octet-stream",
        **headers,
    )


def complete(api, session: dict):
    return api.post(f"/api/v1/upload-sessions/{session['id']}/complete/")


def test_an_upload_interrupted_at_60_percent_resumes_and_is_validated(api, project, log_bytes, settings):
    session = start(api, project, log_bytes)
    count = session["part_count"]
    assert count == -(-len(log_bytes) // PART) and session["part_size"] == PART and session["parts_received"] == []
    order = list(range(count))[::-1]  # any order
    first = order[: int(count * 0.6)]
    for n in first:
        assert put(api, session, n, log_bytes).status_code == 200
    assert put(api, session, first[0], log_bytes).status_code == 200  # a retried part: idempotent
    early = complete(api, session)  # not all parts yet
    assert early.status_code == 400 and early.json()["error"]["code"] == "parts_missing"
    # the client was interrupted: it asks what the server has and sends the rest
    state = api.get(f"/api/v1/upload-sessions/{session['id']}/").json()
    assert state["parts_received"] == sorted(first) and state["state"] == "open"
    for n in sorted(set(range(count)) - set(state["parts_received"])):
        assert (
            put(
                api,
                session,
                n,
                log_bytes,
                HTTP_X_PART_SHA256=hashlib.sha256(log_bytes[n * PART : (n + 1) * PART]).hexdigest(),
            ).status_code
            == 200
        )
    done = complete(api, session)
    assert done.status_code == 201, done.content
    upload = Upload.objects.get(pk=done.json()["id"])
    assert upload.sha256 == hashlib.sha256(log_bytes).hexdigest() and upload.size_bytes == len(log_bytes)
    assert (settings.ARTIFACT_ROOT / upload.storage_name).read_bytes() == log_bytes
    assert Job.objects.filter(kind="validate_upload", subject_id=upload.pk).exists()
    assert complete(api, session).json()["id"] == upload.pk  # a retried completion gives the same answer
    assert UploadSession.objects.get(pk=session["id"]).state == "completed"
    assert list((settings.ARTIFACT_ROOT / "incoming").iterdir()) == []  # nothing left behind
    # the same bytes again, in one request: a duplicate of the upload made in parts
    again = api.post(upload_url(project), {"file": as_file(log_bytes)}, format="multipart")
    assert again.status_code == 200 and again.json()["id"] == upload.pk


def test_without_a_declared_digest_the_servers_digest_stands_and_finds_duplicates(api, project, log_bytes, settings):
    """What the browser form does (it cannot hash a multi-GB file first): no sha256 at creation, a SHA-256 per part."""
    from pipelines import validate_upload

    session = start(api, project, log_bytes, declare=False)
    assert session["sha256"] == ""
    state = api.get(f"/api/v1/upload-sessions/{session['id']}/").json()
    assert state["sha256"] == "" and state["parts_received"] == []
    part0 = log_bytes[:PART]
    bad = put(api, session, 0, log_bytes, HTTP_X_PART_SHA256=hashlib.sha256(part0[::-1]).hexdigest())
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "part_digest_mismatch"  # a corrupted part
    for n in range(session["part_count"]):
        part = log_bytes[n * PART : (n + 1) * PART]
        assert put(api, session, n, log_bytes, HTTP_X_PART_SHA256=hashlib.sha256(part).hexdigest()).status_code == 200
    done = complete(api, session)
    assert done.status_code == 201, done.content
    upload = Upload.objects.get(pk=done.json()["id"])
    assert upload.sha256 == hashlib.sha256(log_bytes).hexdigest() == done.json()["sha256"]  # computed at completion
    assert (settings.ARTIFACT_ROOT / upload.storage_name).read_bytes() == log_bytes
    assert validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk) == "succeeded"
    upload.refresh_from_db()
    assert upload.stage == "valid"
    # the same bytes in a second undeclared session: found a duplicate by the computed digest
    again = start(api, project, log_bytes, declare=False)
    for n in range(again["part_count"]):
        assert put(api, again, n, log_bytes).status_code == 200
    dup = complete(api, again)
    assert dup.status_code == 200 and dup.json()["id"] == upload.pk and dup["X-Duplicate-Upload"] == "true"
    # and in one request too
    single = api.post(upload_url(project), {"file": as_file(log_bytes)}, format="multipart")
    assert single.status_code == 200 and single.json()["id"] == upload.pk
    # other bytes are a new upload, not a duplicate
    other = jsonl(records(trajectories=6, seed=2))
    third = start(api, project, other, declare=False)
    for n in range(third["part_count"]):
        assert put(api, third, n, other).status_code == 200
    fresh = complete(api, third)
    assert fresh.status_code == 201 and fresh.json()["sha256"] == hashlib.sha256(other).hexdigest()


def test_bad_parts_and_a_wrong_digest_are_refused_by_name(api, project, log_bytes):
    session = start(api, project, log_bytes, sha="0" * 64)
    code = lambda r: (r.status_code, r.json()["error"]["code"])
    url = f"/api/v1/upload-sessions/{session['id']}/parts/"
    assert code(api.generic("PUT", f"{url}0/", b"short", content_type="application/octet-stream")) == (
        400,
        "wrong_part_length",
    )
    assert code(
        api.generic("PUT", f"{url}{session['part_count']}/", b"x", content_type="application/octet-stream")
    ) == (400, "no_such_part")
    assert code(put(api, session, 0, log_bytes, HTTP_X_PART_SHA256="f" * 64)) == (400, "part_digest_mismatch")
    for n in range(session["part_count"]):
        assert put(api, session, n, log_bytes).status_code == 200
    assert code(complete(api, session)) == (400, "digest_mismatch")
    assert not Upload.objects.exists() and UploadSession.objects.get(pk=session["id"]).state == "open"


@pytest.mark.parametrize(
    "body",
    [
        {"size": 0, "sha256": "a" * 64},
        {"size": "10", "sha256": "a" * 64},
        {"size": 10, "sha256": "xyz"},
        {"size": 10, "sha256": ["a"]},
        {"size": 10, "sha256": ""},
        {"size": 10, "sha256": "a" * 64, "name": {"a": 1}},
    ],
)
def test_a_bad_declaration_is_a_400(api, project, body):
    response = api.post(f"/api/v1/projects/{project.slug}/upload-sessions/", body, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_upload_session"


def test_a_session_is_the_projects_own(api, project, other_project, log_bytes):
    from rest_framework.test import APIClient

    from audit_portal.accounts.services import issue_api_key

    session = start(api, project, log_bytes)
    other = APIClient()
    other.credentials(
        HTTP_AUTHORIZATION="Bearer " + issue_api_key(project=other_project, name="o", scopes=["read", "submit"]).token
    )
    assert other.get(f"/api/v1/upload-sessions/{session['id']}/").status_code == 404
    assert put(other, session, 0, log_bytes).status_code == 404
    assert complete(other, session).status_code == 404


def test_consistency_expects_an_open_sessions_file_and_reports_an_abandoned_one(api, project, log_bytes):
    from datetime import timedelta

    from django.utils import timezone

    from audit_portal.jobs.consistency import check

    session = start(api, project, log_bytes)
    assert put(api, session, 0, log_bytes).status_code == 200
    report = check(grace_seconds=-1)
    assert not [w for w in report.warnings if "session-" in w]
    UploadSession.objects.filter(pk=session["id"]).update(updated_at=timezone.now() - timedelta(days=8))
    report = check(grace_seconds=-1)
    assert [w for w in report.warnings if "abandoned" in w and session["id"].replace("-", "") in w]
