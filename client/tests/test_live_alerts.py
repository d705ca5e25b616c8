"""Run.alerts / Run.live_view while a run trains: the portal's run found through an uploaded segment, its alert
states and live view read back; None (never an exception) while the portal has no run yet or is unreachable."""
import pytest

from audit_portal_client import Client, PortalError, PortalUnavailable


class Portal:
    """Answers GETs from a script: path -> list of answers, each used once (the last one repeats); an exception
    instance in the list is raised."""

    def __init__(self, script):
        self.script = {k: list(v) for k, v in script.items()}
        self.calls = []

    def __call__(self, path):
        self.calls.append(path)
        answers = self.script[path]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _run(monkeypatch, tmp_path, script):
    c = Client("http://127.0.0.1:9", "unused")
    portal = Portal(script)
    monkeypatch.setattr(c, "get", portal)
    run = c.run("demo", "grpo", spool_dir=tmp_path, live=False)
    return run, portal


FIRING = {"run": 3, "firing": True, "rules": [{"rule": 1, "name": "budget", "state": "firing", "value": 0.07}]}


def test_nothing_before_a_segment_is_uploaded_and_validated(monkeypatch, tmp_path):
    run, portal = _run(monkeypatch, tmp_path, {"/uploads/7/": [{"run": None}, {"run": 3}],
                                               "/runs/3/alerts/": [FIRING],
                                               "/runs/3/live/": [PortalError("not found", 404), {"steps": 4}]})
    assert run.alerts() is None and portal.calls == []  # no segment uploaded: nothing asked
    run.spool.state["uploads"]["seg-000001.parquet"] = 7
    assert run.alerts() is None  # uploaded, not validated yet: no run
    assert run.alerts() == FIRING and run.run_id() == 3
    assert run.live_view() is None  # no segment merged yet: the portal's 404
    assert run.live_view() == {"steps": 4}
    assert portal.calls.count("/uploads/7/") == 2  # the run id is kept once known


def test_an_unreachable_portal_is_none_and_a_refusal_is_raised(monkeypatch, tmp_path):
    run, _ = _run(monkeypatch, tmp_path, {"/uploads/7/": [PortalUnavailable("down"), {"run": 3}],
                                          "/runs/3/alerts/": [PortalError("forbidden", 403)]})
    run.spool.state["uploads"]["seg-000001.parquet"] = 7
    assert run.alerts() is None  # the training loop carries on
    with pytest.raises(PortalError, match="forbidden"):
        run.alerts()
