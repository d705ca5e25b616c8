"""The web server scripts/up starts (scripts/web: uvicorn) streams an upload without growing, answers a bad one with
the JSON refusal, and serves the live pages' websockets (a signed-in session gets the project feed's snapshot, a
connection without one is refused). A real server process on a private embedded portal
(bench/upload_memory.py), not the test client."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.upload_memory import PY, measured_upload, private_web, upload  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("web_server")]

SESSION = """
from django.contrib.auth import get_user_model, SESSION_KEY, BACKEND_SESSION_KEY, HASH_SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
u = get_user_model().objects.get(username="bench"); s = SessionStore()
s[SESSION_KEY] = str(u.pk); s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
s[HASH_SESSION_KEY] = u.get_session_auth_hash(); s.create(); print(s.session_key)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_uvicorn_streams_uploads_and_serves_websockets():
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    port = free_port()
    with private_web("uvicorn", port) as (proc, token, env):
        status, body, _, _ = upload(port, token, "valid", 1 << 20, 60)  # warm-up, and a job for the feed
        assert status == 201, body
        big = measured_upload(proc, port, token, "valid", 200, max_rss_mb=4000)
        assert big["status"] == 201 and not big["killed_at_cap"], big
        # daphne grew by about 10x the upload here (256 MiB: +2.5 GiB); a streaming server by a few MiB
        assert big["growth_mb"] < 60, big
        bad = measured_upload(proc, port, token, "one-line", 80, max_rss_mb=4000)  # past the 64 MiB line cap
        assert (bad["status"], bad["code"]) == (400, "line_too_long"), bad
        assert bad["growth_mb"] < 60, bad

        session = subprocess.run([PY, "manage.py", "shell", "-c", SESSION], cwd=ROOT, env=env, check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-1]
        url, origin = f"ws://127.0.0.1:{port}/ws/projects/bench/feed/", f"http://127.0.0.1:{port}"
        with connect(url, origin=origin, additional_headers={"Cookie": f"sessionid={session}"},
                     open_timeout=10) as ws:
            first = json.loads(ws.recv(timeout=10))
        assert first["type"] == "job" and first["job"]["kind"] == "validate_upload", first
        # a consumer that closes before accepting (no session: 4401) is a refused handshake, HTTP 403, per the ASGI spec
        with pytest.raises(InvalidStatus) as refused:
            connect(url, origin=origin, open_timeout=10)
        assert refused.value.response.status_code == 403
