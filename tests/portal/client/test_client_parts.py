"""The client library's uploads in parts against a running portal (issue 26): a log above the client's threshold goes
as an upload session, the connection is lost at 60 % of the parts, the same call again sends only the missing ones,
and the upload is validated and certified with the file's SHA-256. (Without a portal: client/tests/
test_upload_parts.py.)"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import requests
from celery.contrib.testing.worker import start_worker

from audit_portal.celery import app
from audit_portal.runs import chunked
from audit_portal.runs.models import Upload, UploadSession

from ..conftest import jsonl, records

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "client"))

from audit_portal_client import Client, PortalUnavailable
from audit_portal_client import upload as parts

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
PART = 4096


def test_an_upload_in_parts_interrupted_at_60_percent_resumes_and_certifies(
    live_server, project, submit_token, tmp_path, monkeypatch
):
    import pipelines  # noqa: F401 - registers the tasks, as `celery -A` would

    monkeypatch.setattr(chunked, "PART_BYTES", PART)
    monkeypatch.setattr(parts, "BACKOFF", 0.0)
    data = jsonl(records(trajectories=12))
    count = -(-len(data) // PART)
    assert count >= 8
    path = tmp_path / "run.jsonl"
    path.write_bytes(data)
    client = Client(live_server.url, submit_token, timeout=10)
    real = client.session.request
    sent = []

    def flaky(method, url, **kw):  # the network goes away once 60 % of the parts are through
        if method == "PUT":
            if len(sent) >= int(0.6 * count):
                raise requests.ConnectionError("network unreachable")
            sent.append(int(url.rstrip("/").rsplit("/", 1)[1]))
        return real(method, url, **kw)

    client.session.request = flaky
    with pytest.raises(PortalUnavailable):
        client.upload(project.slug, path, parts_above=PART, state_dir=tmp_path / "state")
    session = UploadSession.objects.get(project=project)
    assert session.state == "open" and session.parts_received == sent == list(range(int(0.6 * count)))
    assert session.sha256 == hashlib.sha256(data).hexdigest()  # declared at creation, checked at completion
    assert not Upload.objects.exists()

    client.session.request = real
    puts = []

    def counting(method, url, **kw):
        if method == "PUT":
            puts.append(int(url.rstrip("/").rsplit("/", 1)[1]))
        return real(method, url, **kw)

    client.session.request = counting
    up = client.upload(project.slug, path, parts_above=PART, state_dir=tmp_path / "state")
    assert puts == list(range(int(0.6 * count), count))  # only the missing parts
    assert up["sha256"] == hashlib.sha256(data).hexdigest() and up["size_bytes"] == len(data)
    assert UploadSession.objects.get(pk=session.pk).state == "completed"
    assert not list((tmp_path / "state" / "uploads").glob("*.json"))
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=30):
        result = client.wait_for_certificate(up["id"], timeout=240)
    assert Upload.objects.get(pk=up["id"]).stage == "valid"
    assert result.certificate_id is not None and result.certificate.get("sequences")
