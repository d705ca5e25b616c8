"""Client.wait_for_routing / Run.finish(require_replay=True): the routing audit's verdict read the way the portal's
API serves it (an upload's jobs, then the job's result), with the portal's answers played back in order."""

import pytest

from audit_portal_client import Client, ReplayFailed


class Portal:
    """Answers GETs from a script: path -> list of responses, each used once (the last one repeats)."""

    def __init__(self, script):
        self.script = {k: list(v) for k, v in script.items()}

    def __call__(self, path):
        answers = self.script[path]
        return answers.pop(0) if len(answers) > 1 else answers[0]


def _client(monkeypatch, script):
    c = Client("http://127.0.0.1:9", "unused")
    monkeypatch.setattr(c, "get", Portal(script))
    return c


FAIL = {"state": "FAIL", "reason": "1 of 4 R3 call(s) …", "failed": [{"call_id": "c2", "layers_flipped": [1]}]}


def test_waits_for_the_routing_job_and_returns_its_report(monkeypatch):
    c = _client(
        monkeypatch,
        {
            "/uploads/7/": [
                {"stage": "processing", "jobs": []},
                {"stage": "valid", "jobs": [{"id": 3, "kind": "certify_upload"}, {"id": 5, "kind": "routing_audit"}]},
            ],
            "/jobs/5/": [{"id": 5, "state": "running"}, {"id": 5, "state": "succeeded", "result": {"replay": FAIL}}],
        },
    )
    assert c.wait_for_routing(7, poll=0.0)["replay"] == FAIL


def test_an_upload_without_routes_has_no_routing_job(monkeypatch):
    c = _client(monkeypatch, {"/uploads/8/": [{"stage": "valid", "jobs": [{"id": 3, "kind": "certify_upload"}]}]})
    assert c.wait_for_routing(8, poll=0.0)["replay"]["state"] == "NOT_DECLARED"


def test_replay_failed_names_calls_and_layers():
    e = ReplayFailed(7, FAIL)
    assert "routing replay FAIL" in str(e) and "call c2 at layer(s) 1" in str(e) and e.replay is FAIL


def test_a_failed_routing_job_is_a_portal_error(monkeypatch):
    from audit_portal_client import PortalError

    c = _client(
        monkeypatch,
        {
            "/uploads/9/": [{"stage": "valid", "jobs": [{"id": 6, "kind": "routing_audit"}]}],
            "/jobs/6/": [{"id": 6, "state": "failed", "error": "line 3 (call x): …"}],
        },
    )
    with pytest.raises(PortalError, match="routing audit job 6 failed: line 3"):
        c.wait_for_routing(9, poll=0.0)
