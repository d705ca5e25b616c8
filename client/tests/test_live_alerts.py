"""Run.alerts / Run.live_view while a run trains: the run is started on the portal by ``run()`` (its id known from
then on), its alert states and live view read back; None (never an exception) while the portal has no live view yet
or is unreachable; offline at start, the run is started by the uploader once the portal answers."""

import pytest

from audit_portal_client import Client, PortalError, PortalUnavailable


class Portal:
    """Answers requests from a script: (method, path) -> list of answers, each used once (the last one repeats); an
    exception instance in the list is raised."""

    def __init__(self, script):
        self.script = {k: list(v) for k, v in script.items()}
        self.calls = []

    def __call__(self, method, path, **kw):
        self.calls.append((method, path))
        answers = self.script[(method, path)]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _run(monkeypatch, tmp_path, script):
    c = Client("http://127.0.0.1:9", "unused")
    portal = Portal(script)
    monkeypatch.setattr(c, "_request", portal)
    run = c.run("demo", "grpo", spool_dir=tmp_path, live=False)
    return run, portal


FIRING = {"run": 3, "firing": True, "rules": [{"rule": 1, "name": "budget", "state": "firing", "value": 0.07}]}
START = ("POST", "/projects/demo/runs/")


def test_the_run_is_known_from_the_start_and_its_live_view_read_back(monkeypatch, tmp_path):
    run, portal = _run(
        monkeypatch,
        tmp_path,
        {
            START: [{"id": 3}],
            ("GET", "/runs/3/alerts/"): [FIRING],
            ("GET", "/runs/3/live/"): [PortalError("not found", 404), PortalError("not found", 404), {"steps": 4}],
        },
    )
    assert run.run_id() == 3 and run.url == "http://127.0.0.1:9/p/demo/runs/3/"
    assert run.alerts() == FIRING
    assert run.live_view() is None  # no segment merged yet: the portal's 404
    assert run.live_view() == {"steps": 4}
    assert portal.calls.count(START) == 1


def test_an_unreachable_portal_is_none_and_a_refusal_is_raised(monkeypatch, tmp_path):
    run, _ = _run(
        monkeypatch,
        tmp_path,
        {
            START: [{"id": 3}],
            ("GET", "/runs/3/live/"): [PortalError("nf", 404)],
            ("GET", "/runs/3/alerts/"): [PortalUnavailable("down"), PortalError("forbidden", 403)],
        },
    )
    assert run.alerts() is None  # the training loop carries on
    with pytest.raises(PortalError, match="forbidden"):
        run.alerts()


def test_offline_at_start_then_started_by_the_uploader(monkeypatch, tmp_path, caplog):
    run, portal = _run(
        monkeypatch,
        tmp_path,
        {
            START: [PortalUnavailable("down"), PortalUnavailable("down"), {"id": 9}],
            ("GET", "/runs/9/live/"): [PortalError("nf", 404)],
        },
    )
    assert run.offline and run.run_id() is None and run.alerts() is None
    assert len([r for r in caplog.records if "not reachable" in r.getMessage()]) == 1  # said once
    assert not run._ensure_started() and run.run_id() is None
    assert run._ensure_started() and run.run_id() == 9 and not run.offline


def test_a_refused_key_or_project_fails_at_start_with_the_portals_message(monkeypatch, tmp_path):
    c = Client("http://127.0.0.1:9", "bad")
    monkeypatch.setattr(
        c,
        "_request",
        Portal({START: [PortalError("POST /projects/demo/runs/: HTTP 401 not_authenticated: Invalid API key.", 401)]}),
    )
    with pytest.raises(PortalError, match="Invalid API key") as exc:
        c.run("demo", "grpo", spool_dir=tmp_path, live=False)
    assert exc.value.status == 401


def test_a_url_that_is_not_a_portal_fails_at_start(monkeypatch, tmp_path):
    c = Client("http://127.0.0.1:9", "k")
    monkeypatch.setattr(c, "_request", Portal({START: [{}]}))
    with pytest.raises(PortalError, match="not an Audit Portal"):
        c.run("demo", "grpo", spool_dir=tmp_path, live=False)


def test_environment_variables_configure_the_client(monkeypatch, tmp_path):
    monkeypatch.setenv("AUDIT_PORTAL_URL", "http://portal.example/")
    monkeypatch.setenv("AUDIT_PORTAL_KEY", "k-123")
    monkeypatch.setenv("AUDIT_PORTAL_PROJECT", "demo")
    c = Client()
    assert c.url == "http://portal.example" and c.api_key == "k-123" and c.project == "demo"
    assert c.session.headers["Authorization"] == "Bearer k-123"
    monkeypatch.setattr(c, "_request", Portal({START: [{"id": 4}], ("GET", "/runs/4/live/"): [PortalError("", 404)]}))
    run = c.run(spool_dir=tmp_path, live=False)  # project from the environment, a made-up name
    assert run.project == "demo" and run.name.startswith("run-") and run.run_id() == 4
    monkeypatch.delenv("AUDIT_PORTAL_URL")
    with pytest.raises(ValueError, match="AUDIT_PORTAL_URL"):
        Client()


def _ctx_portal():
    return Portal(
        {
            START: [{"id": 5}],
            ("GET", "/runs/5/live/"): [
                PortalError("nf", 404),
                PortalError("nf", 404),
                {
                    "run": 5,
                    "steps": 1,
                    "merged_uploads": [11],
                    "skipped_uploads": [],
                    "best_bound": 0.5,
                    "summary": {"sequences": 2},
                },
            ],
            ("GET", "/uploads/11/"): [{"id": 11, "stage": "valid"}],
            ("POST", "/runs/5/state/"): [{"id": 5}],
        }
    )


def test_the_context_manager_finishes_or_marks_the_run_failed(monkeypatch, tmp_path):
    import numpy as np

    b = dict(rollout_logprobs=-np.ones((2, 3)), trainer_logprobs=-np.ones((2, 3)), response_ids=np.ones((2, 3), int))
    for fails in (False, True):
        c = Client("http://127.0.0.1:9", "k")
        portal = _ctx_portal()
        monkeypatch.setattr(c, "_request", portal)
        monkeypatch.setattr(c, "get", lambda path: portal("GET", path))
        sent = []
        monkeypatch.setattr(
            c, "upload", lambda project, path, steps=None, progress=None: sent.append(steps) or {"id": 11}
        )
        with pytest.raises(RuntimeError) if fails else __import__("contextlib").nullcontext():
            with c.run("demo", "ctx", spool_dir=tmp_path / str(fails), live=False) as run:
                run.log_step(0, **b)
                if fails:
                    raise RuntimeError("the trainer crashed")
        assert sent == [(0, 0)]  # what was logged is uploaded either way, once
        state_calls = [k for k in portal.calls if k == ("POST", "/runs/5/state/")]
        assert len(state_calls) == 1
    assert run._finished


def test_an_existing_run_is_continued_and_its_held_steps_not_logged_again(monkeypatch, tmp_path, caplog):
    import numpy as np

    held = {"run": 3, "steps": 2, "series": {"step": [0, 1]}}
    script = {START: [{"id": 3}], ("GET", "/runs/3/live/"): [held]}
    b = dict(rollout_logprobs=-np.ones((2, 3)), trainer_logprobs=-np.ones((2, 3)), response_ids=np.ones((2, 3), int))
    _run(monkeypatch, tmp_path / "a", script)  # the default continues it, and says so once
    assert len([r for r in caplog.records if "continuing it" in r.getMessage()]) == 1
    with pytest.raises(PortalError, match="exists with 2 step"):
        c = Client("http://127.0.0.1:9", "k")
        monkeypatch.setattr(c, "_request", Portal(script))
        c.run("demo", "grpo", spool_dir=tmp_path / "b", live=False, resume=False)
    c = Client("http://127.0.0.1:9", "k")
    monkeypatch.setattr(c, "_request", Portal(script))
    run = c.run("demo", "grpo", spool_dir=tmp_path / "c", live=False, resume=True)
    assert run.log_step(1, **b) == 0 and run.log_step(2, **b) == 2 and run.steps_skipped == 1
