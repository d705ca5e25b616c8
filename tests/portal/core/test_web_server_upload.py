"""The web server scripts/up starts (scripts/web: uvicorn) streams an upload without growing, answers a bad one with
the JSON refusal, and serves the live pages' websockets (a signed-in session gets the project feed's snapshot, a
connection without one is refused). A real server process on a private embedded portal
(bench/upload_memory.py), not the test client."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from bench.upload_memory import PY, measured_upload, private_web, rss_mb, upload, valid_block  # noqa: E402 - after the repository root is put on sys.path

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("web_server")]

SESSION = """
from django.contrib.auth import get_user_model, SESSION_KEY, BACKEND_SESSION_KEY, HASH_SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
u = get_user_model().objects.get(username="bench"); s = SessionStore()
s[SESSION_KEY] = str(u.pk); s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
s[HASH_SESSION_KEY] = u.get_session_auth_hash(); s.create(); print(s.session_key)
"""


def raw(
    port: int, method: str, path: str, token: str, body: bytes = b"", content_type: str = "", length: int | None = None
) -> tuple[int, str, bytes]:
    """One request on a plain socket (the server's own refusals included); (status, content type, body)."""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n"
        f"Content-Length: {len(body) if length is None else length}\r\n"
        + (f"Content-Type: {content_type}\r\n" if content_type else "")
        + "\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    header, _, payload = data.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        whole = b""
        while True:
            size, _, rest = payload.partition(b"\r\n")
            if not int(size, 16):
                break
            whole, payload = whole + rest[: int(size, 16)], rest[int(size, 16) + 2 :]
        payload = whole
    return int(lines[0].split()[1]), headers.get("content-type", ""), payload


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

        # the server's and the application's refusals under /api/ are all the JSON envelope
        uploads = "/api/v1/projects/bench/uploads/"
        for (method, path, body, ctype, length), (want, code) in {
            ("POST", uploads, b"--x\r\n\r\n", "multipart/form-data", None): (400, "malformed_request"),
            ("GET", "/api/v1/no-such-thing/", b"", "", None): (404, "not_found"),
            ("PUT", uploads, b"{}", "application/json", None): (405, "method_not_allowed"),
            ("POST", uploads, b"", "multipart/form-data; boundary=x", 50 << 30): (413, "upload_too_large"),
            (
                "POST",
                "/api/v1/projects/bench/alert-rules/",
                b"[" * 100_000 + b"]" * 100_000,
                "application/json",
                None,
            ): (400, "json_too_deep"),
        }.items():
            status, got_type, payload = raw(port, method, path, token, body, ctype, length)
            assert (status, got_type) == (want, "application/json"), (path, status, got_type, payload[:200])
            assert json.loads(payload)["error"]["code"] == code, payload[:200]

        # a resumable upload in parts through the same server: parts in reverse order, streamed to their place
        block = valid_block()
        data = block.replace(b'"call_id":"', b'"call_id":"s-') * (40 * (1 << 20) // len(block) + 1)
        before = rss_mb(proc.pid)
        status, _, body = raw(
            port,
            "POST",
            "/api/v1/projects/bench/upload-sessions/",
            token,
            json.dumps({"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "name": "parts.jsonl"}).encode(),
            "application/json",
        )
        created = json.loads(body)
        assert status == 201 and created["part_count"] == 3, created
        part = created["part_size"]
        for n in reversed(range(created["part_count"])):
            status, _, body = raw(
                port,
                "PUT",
                f"/api/v1/upload-sessions/{created['id']}/parts/{n}/",
                token,
                data[n * part : (n + 1) * part],
                "application/octet-stream",
            )
            assert status == 200, body[:300]
        status, _, body = raw(port, "POST", f"/api/v1/upload-sessions/{created['id']}/complete/", token)
        assert status == 201 and json.loads(body)["size_bytes"] == len(data), body[:300]
        assert rss_mb(proc.pid) - before < 60

        session = (
            subprocess.run(
                [PY, "manage.py", "shell", "-c", SESSION], cwd=ROOT, env=env, check=True, capture_output=True, text=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        url, origin = f"ws://127.0.0.1:{port}/ws/projects/bench/feed/", f"http://127.0.0.1:{port}"
        with connect(url, origin=origin, additional_headers={"Cookie": f"sessionid={session}"}, open_timeout=10) as ws:
            first = json.loads(ws.recv(timeout=10))
        assert first["type"] == "job" and first["job"]["kind"] == "validate_upload", first
        # a consumer that closes before accepting (no session: 4401) is a refused handshake, HTTP 403, per the ASGI spec
        with pytest.raises(InvalidStatus) as refused:
            connect(url, origin=origin, open_timeout=10)
        assert refused.value.response.status_code == 403
