"""Large files as resumable uploads in parts (issue 26), against a fake portal that speaks the upload-session protocol
of audit_portal/runs/chunked.py at the HTTP level (the client's ``requests`` session is replaced, so status codes and
JSON errors go through ``Client._request`` as they would from the portal). The real portal: tests/portal/
test_client_parts.py."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import uuid

import pytest
import requests

from audit_portal_client import Client, PortalError, PortalUnavailable
from audit_portal_client import upload as parts
from audit_portal_client.cli import _size
from audit_portal_client.cli import main as cli_main

PART = 1000


class Response:
    def __init__(self, status: int, body: dict):
        self.status_code, self.body = status, body
        self.text = json.dumps(body, default=lambda b: f"<{len(b)} bytes>")

    def json(self):
        return self.body


def error(status, code, message, **extra):
    return Response(status, {"error": {"code": code, "message": message, **extra}})


class FakePortal:
    """Upload sessions as the portal keeps them: parts in any order, exact lengths, checked part and file digests.
    ``down_after``: once that many parts are stored, every request fails with a connection error (the network went
    away); ``faults``: the answers to give, in order, to the next PUTs of a part before storing it."""

    def __init__(self, part_size=PART, max_open=10):
        self.part_size, self.max_open = part_size, max_open
        self.sessions: dict[str, dict] = {}
        self.log: list[tuple[str, str]] = []
        self.puts: list[int] = []
        self.uploads: list[dict] = []
        self.down_after: int | None = None
        self.faults: list = []
        self.created: list[dict] = []  # the JSON bodies that started sessions

    def install(self, client: Client) -> Client:
        client.session.request = self.request
        return client

    def stored(self):
        return sum(len(s["parts"]) for s in self.sessions.values())

    def request(self, method, url, timeout=None, data=None, json=None, headers=None, **_):
        path = url.split("/api/v1", 1)[1]
        self.log.append((method, path))
        if self.down_after is not None and self.stored() >= self.down_after:
            raise requests.ConnectionError("connection refused")
        bits = path.strip("/").split("/")
        if method == "POST" and bits[-1] == "upload-sessions":
            return self.create(json)
        if method == "POST" and bits[-1] == "uploads":
            body = data.read(-1)
            return self.store_upload(body, "multipart")
        s = self.sessions.get(bits[1])
        if s is None:
            return error(404, "not_found", "No such upload session.")
        if method == "GET":
            return Response(200, self.view(s))
        if method == "PUT":
            return self.put(s, int(bits[3]), data, headers or {})
        if method == "POST" and bits[-1] == "complete":
            return self.complete(s)
        raise AssertionError(f"unexpected {method} {path}")

    def view(self, s):
        count = -(-s["size"] // self.part_size)
        return {
            "id": s["id"],
            "size_bytes": s["size"],
            "sha256": s["sha256"],
            "part_size": self.part_size,
            "part_count": count,
            "parts_received": sorted(s["parts"]),
            "state": s["state"],
            "upload": s["upload"],
        }

    def create(self, body):
        if sum(s["state"] == "open" for s in self.sessions.values()) >= self.max_open:
            return error(
                400, "too_many_upload_sessions", "A project has at most 10 open upload sessions; complete one first."
            )
        self.created.append(body)
        sid = str(uuid.uuid4())
        self.sessions[sid] = {
            "id": sid,
            "size": body["size"],
            "sha256": body.get("sha256") or "",
            "parts": {},
            "state": "open",
            "upload": None,
            "name": body.get("name"),
        }
        return Response(201, self.view(self.sessions[sid]))

    def put(self, s, n, data, headers):
        self.puts.append(n)
        if self.faults:
            fault = self.faults.pop(0)
            if isinstance(fault, Exception):
                raise fault
            return fault
        want = min(self.part_size, s["size"] - n * self.part_size)
        if s["state"] != "open":
            return error(400, "upload_session_closed", "This upload session is completed; start a new one.")
        if len(data) != want:
            return error(400, "wrong_part_length", f"Part {n} is {want} bytes; the request declares {len(data)}.")
        if headers.get("X-Part-SHA256") and hashlib.sha256(data).hexdigest() != headers["X-Part-SHA256"]:
            return error(400, "part_digest_mismatch", f"Part {n}'s SHA-256 differs; send it again.")
        assert headers.get("Content-Type") == "application/octet-stream"
        s["parts"][n] = bytes(data)
        return Response(200, self.view(s))

    def complete(self, s):
        if s["state"] == "completed":
            return Response(200, next(u for u in self.uploads if u["id"] == s["upload"]))
        count = -(-s["size"] // self.part_size)
        missing = sorted(set(range(count)) - set(s["parts"]))
        if missing:
            return error(
                400, "parts_missing", f"{len(missing)} part(s) not stored yet: {missing[:20]}.", missing=missing
            )
        whole = b"".join(s["parts"][n] for n in range(count))
        if s["sha256"] and hashlib.sha256(whole).hexdigest() != s["sha256"]:
            return error(
                400,
                "digest_mismatch",
                f"The assembled file's SHA-256 is {hashlib.sha256(whole).hexdigest()}"
                f", not the declared {s['sha256']}; send the parts again (or start over).",
            )
        answer = self.store_upload(whole, "parts")
        s["state"], s["upload"] = "completed", answer.body["id"]
        return answer

    def store_upload(self, body: bytes, how: str):
        up = {
            "id": len(self.uploads) + 1,
            "stage": "received",
            "sha256": hashlib.sha256(body).hexdigest(),
            "size_bytes": len(body),
            "how": how,
            "body": body,
        }
        self.uploads.append(up)
        return Response(201, up)


@pytest.fixture
def portal():
    return FakePortal()


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    waits = []
    monkeypatch.setattr(parts.time, "sleep", waits.append)
    return waits


@pytest.fixture
def big(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(bytes(range(256)) * 37 + b"tail")  # 9476 bytes: 10 parts, the last one short
    return path


def client(portal) -> Client:
    return portal.install(Client("http://portal.test", "key", timeout=5))


def test_a_small_file_goes_in_one_request(portal, tmp_path):
    small = tmp_path / "small.jsonl"
    small.write_bytes(b'{"schema": "fcr/1"}\n')
    up = client(portal).upload("demo", small, parts_above=1000, state_dir=tmp_path / "state")
    assert portal.log == [("POST", "/projects/demo/uploads/")] and up["how"] == "multipart"
    assert b'{"schema": "fcr/1"}' in portal.uploads[0]["body"]


def test_a_large_file_goes_in_parts_with_its_digest_and_each_parts_digest(portal, big, tmp_path):
    seen = []
    up = client(portal).upload(
        "demo",
        big,
        parts_above=4096,
        state_dir=tmp_path / "state",
        progress=lambda done, total: seen.append((done, total)),
    )
    data = big.read_bytes()
    assert up["how"] == "parts" and up["sha256"] == hashlib.sha256(data).hexdigest() and up["body"] == data
    (s,) = portal.sessions.values()
    assert s["sha256"] == hashlib.sha256(data).hexdigest() and s["name"] == "run.jsonl"  # declared at creation
    assert portal.puts == list(range(10))
    assert seen[0] == (0, len(data)) and seen[-1] == (len(data), len(data)) and len(seen) == 11
    assert not list((tmp_path / "state" / "uploads").glob("*.json"))  # completed: nothing left to resume


def test_interrupted_at_60_percent_a_second_call_sends_only_the_missing_parts(portal, big, tmp_path, caplog):
    c = client(portal)
    portal.down_after = 6  # the network goes away once 6 of 10 parts are stored
    with pytest.raises(PortalUnavailable):
        c.upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    remembered = list((tmp_path / "state" / "uploads").glob("*.json"))
    assert len(remembered) == 1 and not portal.uploads
    (sid,) = portal.sessions
    assert json.loads(remembered[0].read_text())["session"] == sid
    assert sorted(portal.sessions[sid]["parts"]) == list(range(6))
    portal.down_after, portal.puts, portal.log = None, [], []
    seen = []
    with caplog.at_level(logging.INFO, logger="audit_portal_client.upload"):
        up = c.upload(
            "demo", big, parts_above=4096, state_dir=tmp_path / "state", progress=lambda done, total: seen.append(done)
        )
    assert portal.puts == [6, 7, 8, 9]  # only what the portal did not have
    assert portal.log[0] == ("GET", f"/upload-sessions/{sid}/") and len(portal.sessions) == 1  # the same session
    assert seen[0] == 6 * PART  # the progress starts at what is stored
    assert up["sha256"] == hashlib.sha256(big.read_bytes()).hexdigest() and up["body"] == big.read_bytes()
    assert "resuming upload session" in caplog.text and "6 of 10 parts stored" in caplog.text
    assert not remembered[0].exists()


def test_a_changed_file_is_not_resumed_into_the_old_session(portal, big, tmp_path):
    c = client(portal)
    portal.down_after = 3
    with pytest.raises(PortalUnavailable):
        c.upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    portal.down_after = None
    big.write_bytes(big.read_bytes()[::-1])  # same size, other bytes
    up = c.upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    assert len(portal.sessions) == 2 and up["body"] == big.read_bytes()


def test_network_errors_5xx_and_a_damaged_part_are_retried_with_backoff(portal, big, tmp_path, no_waiting):
    portal.faults = [
        requests.ConnectionError("reset"),
        Response(503, {}),
        error(400, "part_digest_mismatch", "damaged"),
    ]
    up = client(portal).upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    assert portal.puts[:4] == [0, 0, 0, 0] and portal.puts[4:] == list(range(1, 10))
    assert no_waiting == [0.5, 1.0, 2.0]
    assert up["body"] == big.read_bytes()


def test_a_part_that_keeps_failing_gives_up_and_keeps_the_session(portal, big, tmp_path):
    portal.faults = [Response(502, {})] * 6
    with pytest.raises(PortalUnavailable, match="502"):
        client(portal).upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    assert portal.puts == [0] * 6 and len(list((tmp_path / "state" / "uploads").glob("*.json"))) == 1


def test_the_portals_refusal_carries_its_json_message(portal, big, tmp_path):
    portal.faults = [error(400, "wrong_part_length", "Part 0 is 1000 bytes; the request declares 3.")]
    with pytest.raises(PortalError, match="wrong_part_length: Part 0 is 1000 bytes") as exc:
        client(portal).upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    assert exc.value.status == 400 and portal.puts == [0]  # not retried


def test_a_digest_mismatch_at_completion_is_refused_and_forgotten(portal, big, tmp_path, monkeypatch):
    real = FakePortal.put

    def flip(self, s, n, data, headers):  # a part that changes on the way without its digest noticing
        if n == 3:
            data, headers = b"X" + data[1:], {k: v for k, v in headers.items() if k != "X-Part-SHA256"}
        return real(self, s, n, data, headers)

    monkeypatch.setattr(FakePortal, "put", flip)
    with pytest.raises(PortalError, match="digest_mismatch: The assembled file's SHA-256"):
        client(portal).upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    assert not list((tmp_path / "state" / "uploads").glob("*.json"))  # the next try starts a new session


def test_parts_the_portal_reports_missing_at_completion_are_sent_again(portal, big, tmp_path, monkeypatch):
    real = FakePortal.complete
    lost = []

    def lose_one(self, s):
        if not lost:
            lost.append(s["parts"].pop(4))
        return real(self, s)

    monkeypatch.setattr(FakePortal, "complete", lose_one)
    up = client(portal).upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    assert portal.puts == list(range(10)) + [4] and up["body"] == big.read_bytes()


def test_a_completion_whose_answer_was_lost_gives_the_same_upload(portal, big, tmp_path, monkeypatch):
    real = FakePortal.complete

    def lost_answer(self, s):
        real(self, s)
        raise requests.ConnectionError("reset after the portal completed")

    monkeypatch.setattr(FakePortal, "complete", lost_answer)
    c = client(portal)
    with pytest.raises(PortalUnavailable):
        c.upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    monkeypatch.setattr(FakePortal, "complete", real)
    portal.puts = []
    up = c.upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    assert portal.puts == [] and len(portal.uploads) == 1 and up["id"] == portal.uploads[0]["id"]


def test_too_many_open_sessions_falls_back_to_one_request(big, tmp_path):
    portal = FakePortal(max_open=0)
    up = client(portal).upload("demo", big, parts_above=4096, state_dir=tmp_path / "state")
    assert up["how"] == "multipart" and big.read_bytes() in up["body"]


def test_steps_go_in_one_request(portal, big, tmp_path):
    up = client(portal).upload("demo", big, steps=(0, 3), parts_above=4096, state_dir=tmp_path / "state")
    assert up["how"] == "multipart" and not portal.sessions


def test_cli_resumes_after_an_interruption_with_a_progress_bar(portal, big, tmp_path, monkeypatch, capsys):
    import audit_portal_client.cli as cli

    monkeypatch.setenv("AUDIT_PORTAL_STATE", str(tmp_path / "state"))
    monkeypatch.setattr(cli, "Client", lambda *a, **kw: portal.install(Client(*a, **kw)))
    base = [
        "--url",
        "http://portal.test",
        "--api-key",
        "k",
        "upload",
        str(big),
        "--project",
        "demo",
        "--parts-above",
        "4K",
    ]
    portal.down_after = 6
    assert cli_main(base + ["--timeout", "0", "--quiet"]) == 3  # unreachable: run it again
    assert "portal unreachable" in capsys.readouterr().err
    portal.down_after, portal.puts = None, []
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert cli_main(base + ["--progress"]) == 0
    bars = cli.sys.stderr.getvalue()
    assert portal.puts == [6, 7, 8, 9] and "upload" in bars and "sha256" in bars
    assert capsys.readouterr().out.startswith("upload 1 (received")


def test_cli_single_request_flag(portal, big, tmp_path, monkeypatch, capsys):
    import audit_portal_client.cli as cli

    monkeypatch.setattr(cli, "Client", lambda *a, **kw: portal.install(Client(*a, **kw)))
    assert (
        cli_main(
            [
                "--url",
                "http://p",
                "--api-key",
                "k",
                "upload",
                str(big),
                "--project",
                "demo",
                "--parts-above",
                "1K",
                "--single-request",
                "--quiet",
            ]
        )
        == 0
    )
    assert not portal.sessions and portal.uploads[0]["how"] == "multipart"


@pytest.mark.parametrize(
    "text, value",
    [("1024", 1024), ("64M", 64 << 20), ("64MiB", 64 << 20), ("1.5G", 3 << 29), ("512k", 512 << 10), ("0", 0)],
)
def test_sizes(text, value):
    assert _size(text) == value


def multipart_fields(body: bytes) -> dict:
    """The plain (non-file) fields of a multipart body, by name."""
    boundary = body.split(b"\r\n", 1)[0]
    out = {}
    for chunk in body.split(boundary)[1:-1]:
        head, _, value = chunk.strip(b"\r\n").partition(b"\r\n\r\n")
        if b"filename=" not in head:
            out[head.split(b'name="')[1].split(b'"')[0].decode()] = value.decode()
    return out


def test_config_and_tags_go_with_a_single_request(portal, tmp_path):
    small = tmp_path / "small.jsonl"
    small.write_bytes(b'{"schema": "fcr/1"}\n')
    config = {"lr": 3e-6, "note": 'caf\u00e9 "quoted"', "layers": [4, 8]}
    client(portal).upload("demo", small, parts_above=1000, config=config, tags=("grpo", "7b"))
    fields = multipart_fields(portal.uploads[0]["body"])
    assert json.loads(fields["config"]) == config and json.loads(fields["tags"]) == ["grpo", "7b"]
    client(portal).upload("demo", small, parts_above=1000)  # none given: none sent
    assert multipart_fields(portal.uploads[1]["body"]) == {}


def test_config_and_tags_go_with_a_session_and_a_resume_keeps_its_own(portal, big, tmp_path):
    portal.down_after = 4
    with pytest.raises(PortalUnavailable):
        client(portal).upload(
            "demo", big, parts_above=4096, state_dir=tmp_path / "state", config={"lr": 1}, tags=["parts"]
        )
    assert len(portal.created) == 1
    assert portal.created[0]["config"] == {"lr": 1} and portal.created[0]["tags"] == ["parts"]
    portal.down_after = None
    up = client(portal).upload("demo", big, parts_above=4096, state_dir=tmp_path / "state", tags=["other"])
    assert up["how"] == "parts" and len(portal.created) == 1  # resumed: the session keeps the tags it started with


def test_cli_tag_and_config_flags(portal, big, tmp_path, monkeypatch, capsys):
    import audit_portal_client.cli as cli

    monkeypatch.setattr(cli, "Client", lambda *a, **kw: portal.install(Client(*a, **kw)))
    base = ["--url", "http://p", "--api-key", "k", "upload", str(big), "--project", "demo", "--quiet"]
    flags = ["--tag", "grpo", "--tag", "7b", "--config", '{"lr": 2e-6}']
    assert cli_main(base + ["--single-request", *flags]) == 0
    fields = multipart_fields(portal.uploads[0]["body"])
    assert json.loads(fields["tags"]) == ["grpo", "7b"] and json.loads(fields["config"]) == {"lr": 2e-6}
    monkeypatch.setenv("AUDIT_PORTAL_STATE", str(tmp_path / "state"))
    assert cli_main(base + ["--parts-above", "4K", *flags]) == 0
    assert portal.created[-1]["tags"] == ["grpo", "7b"] and portal.created[-1]["config"] == {"lr": 2e-6}
    for bad in ("[1, 2]", "{lr: 1}"):
        assert cli_main(base + ["--config", bad]) == 64
        assert "--config: a JSON object" in capsys.readouterr().err
    assert len(portal.uploads) == 2  # a bad --config sends nothing
