"""Abandoned upload sessions expire (audit_portal/runs/chunked.py ``expire_idle_sessions``): an open session with no
part for UPLOAD_SESSION_IDLE_SECONDS is deleted with its preallocated file by the periodic maintenance task; a
session still receiving parts, and a completed one, stay."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone

from audit_portal.runs import chunked
from audit_portal.runs.models import UploadSession

from ..conftest import jsonl, records
from .test_upload_sessions import PART, complete, put, start

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def small_parts(monkeypatch):
    monkeypatch.setattr(chunked, "PART_BYTES", PART)


def _age(session: dict, seconds: float) -> None:
    """Make the session's last activity ``seconds`` ago (``updated_at`` is set on every save)."""
    UploadSession.objects.filter(pk=session["id"]).update(updated_at=timezone.now() - timedelta(seconds=seconds))


def _incoming(settings) -> set[str]:
    return {p.name for p in (settings.ARTIFACT_ROOT / "incoming").iterdir()}


def test_the_maintenance_task_deletes_idle_sessions_and_their_parts_only(api, project, settings):
    from pipelines.maintenance import reap_stale_jobs

    settings.UPLOAD_SESSION_IDLE_SECONDS = 3600
    data = jsonl(records(trajectories=3))
    assert len(data) > 2 * PART
    idle = start(api, project, data)
    assert put(api, idle, 0, data).status_code == 200  # a part stored, then the client went away
    busy = start(api, project, data)
    done = start(api, project, data)
    for n in range(done["part_count"]):
        assert put(api, done, n, data).status_code == 200
    assert complete(api, done).status_code == 201
    for s in (idle, busy, done):
        _age(s, 7200)
    assert put(api, busy, 1, data).status_code == 200  # a part just now: not idle

    files_before = _incoming(settings)
    assert files_before == {f"session-{s['id'].replace('-', '')}.part" for s in (idle, busy)}
    assert UploadSession.objects.count() == 3

    result = reap_stale_jobs()

    assert result["expired_upload_sessions"] == [idle["id"]]
    assert UploadSession.objects.count() == 2
    assert set(map(str, UploadSession.objects.values_list("pk", flat=True))) == {busy["id"], done["id"]}
    assert _incoming(settings) == files_before - {f"session-{idle['id'].replace('-', '')}.part"}
    assert len(_incoming(settings)) == len(files_before) - 1
    # the client comes back: its session is gone, and it is told so
    assert api.get(f"/api/v1/upload-sessions/{idle['id']}/").status_code == 404
    # the session still in use is untouched and completes
    for n in range(busy["part_count"]):
        assert put(api, busy, n, data).status_code == 200
    finished = complete(api, busy)
    assert finished.status_code in (200, 201), finished.content  # the same bytes as `done`: a duplicate
    assert finished.json()["sha256"] == hashlib.sha256(data).hexdigest()


def test_a_session_is_idle_only_after_the_setting(project, settings):
    settings.UPLOAD_SESSION_IDLE_SECONDS = 3600
    session = chunked.create_session(project=project, size=10, sha256=None, name="run.jsonl", created_by="t")
    path = chunked.session_path(session)
    assert path.exists()
    later = timezone.now() + timedelta(seconds=3500)
    assert chunked.expire_idle_sessions(now=later) == {"expired": [], "files_removed": 0}
    assert UploadSession.objects.filter(pk=session.pk).exists() and path.exists()
    much_later = timezone.now() + timedelta(seconds=3700)
    assert chunked.expire_idle_sessions(now=much_later) == {"expired": [str(session.pk)], "files_removed": 1}
    assert not UploadSession.objects.filter(pk=session.pk).exists() and not path.exists()


def test_a_part_sent_to_an_expired_session_is_refused_with_a_reason(project, settings):
    settings.UPLOAD_SESSION_IDLE_SECONDS = 60
    session = chunked.create_session(project=project, size=PART, sha256=None, name="run.jsonl", created_by="t")
    chunked.expire_idle_sessions(now=timezone.now() + timedelta(seconds=120))
    with pytest.raises(chunked.InvalidUploadSession) as err:  # the client held the session from before
        chunked.store_part(session, 0, _Bytes(b"x" * PART), PART, None)
    assert err.value.get_codes() == "upload_session_expired"


class _Bytes:
    def __init__(self, data: bytes):
        self.data = data

    def read(self, n: int) -> bytes:
        out, self.data = self.data[:n], self.data[n:]
        return out
