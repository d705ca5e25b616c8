"""The client's CI gate on replay integrity against a running portal: ``Run.finish(require_replay=True)`` uploads the
run to pytest-django's live server, a real Celery worker validates, certifies and runs the routing audit, and the
client reads the verdict through the API — PASS returns the certificate, one corrupted replayed selection raises
``ReplayFailed`` naming the call and the layer, and a run without routes raises with NOT_DECLARED. The CLI's
``upload --require-replay`` gives the same verdicts as exit codes (0 / 5). The trainer routes travel as a difference
from the rollout's (trainer_routes_delta), so this also checks the delta end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from celery.contrib.testing.worker import start_worker

from audit_portal.celery import app
from audit_portal.jobs.models import Job

from .test_client_e2e import step_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "client"))

from audit_portal_client import Client, ReplayFailed
from audit_portal_client.cli import EXIT_OK, EXIT_REPLAY, main as cli_main
from audit_portal_client.fcr import RecordMeta, step_table

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

B, T, L, K, E = 4, 24, 3, 2, 8


def routed_step(step, corrupt=None):
    """step_batch with R3 routes: the trainer replays the rollout's, except ``corrupt`` = (row, token, layer)."""
    batch = step_batch(step, B=B, T=T)
    rng = np.random.default_rng(100 + step)
    r = np.stack([[[rng.permutation(E)[:K] for _ in range(L)] for _ in range(T)] for _ in range(B)])
    t = r.copy()
    if corrupt is not None:
        b, tok, layer = corrupt
        t[b, tok, layer, 0] = next(x for x in range(E) if x not in r[b, tok, layer])
    return dict(batch, rollout_routed_experts=r, trainer_routed_experts=t, routing_replay="R3", num_experts=E)


def test_finish_require_replay_against_the_running_portal(live_server, project, submit_token, tmp_path, capsys):
    import pipelines  # noqa: F401 - registers the tasks, as `celery -A` would

    client = Client(live_server.url, submit_token, timeout=10)

    def run(name, steps):
        r = client.run(project.slug, name, spool_dir=tmp_path / name, live=False)
        for step, batch in enumerate(steps):
            r.log_step(step, **batch)
        return r

    held = run("r3-held", [routed_step(0), routed_step(1)])
    corrupted = run("r3-corrupted", [routed_step(0), routed_step(1, corrupt=(2, 1, 2))])
    plain = run("no-routes", [step_batch(0)])
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=30):
        result = held.finish(timeout=240, require_replay=True)
        assert result.run_id and result.certificate["sequences"] == B * 2  # the run's live view: both steps
        with pytest.raises(ReplayFailed) as failed:
            corrupted.finish(timeout=240, require_replay=True)
        with pytest.raises(ReplayFailed) as undeclared:
            plain.finish(timeout=240, require_replay=True)
        cli = [
            "--url",
            live_server.url,
            "--api-key",
            submit_token,
            "upload",
            "--project",
            project.slug,
            "--quiet",
            "--require-replay",
            "--timeout",
            "240",
        ]
        for name, batch, code in (
            ("held.parquet", routed_step(5), EXIT_OK),
            ("bad.parquet", routed_step(5, corrupt=(0, 3, 1)), EXIT_REPLAY),
        ):
            pq.write_table(step_table(RecordMeta(run_id="cli"), 5, **batch), tmp_path / name)
            assert cli_main(cli + [str(tmp_path / name)]) == code, capsys.readouterr()
        out = capsys.readouterr()
        assert "routing replay PASS" in out.out and "routing replay FAIL" in out.out
        assert "s5-b0-c0 at layer(s) 1" in out.err  # the failing call and layer, for the CI log
    replay = failed.value.replay
    assert replay["state"] == "FAIL" and replay["failed_layers"] == [2] and replay["failed_calls"] == 1
    (call,) = replay["failed"]
    assert call["layers_flipped"] == [2] and call["pairs_flipped"] == 1 and call["call_id"].endswith("s1-b2-c0")
    assert f"call {call['call_id']} at layer(s) 2" in str(failed.value)  # what a CI log shows
    assert undeclared.value.replay["state"] == "NOT_DECLARED"
    jobs = Job.objects.filter(project=project, kind="routing_audit")
    assert jobs.count() == 4 and all(j.state == "succeeded" for j in jobs)  # the plain run got none
    from audit_portal.runs.models import Upload

    held_job = jobs.get(subject_id=Upload.objects.get(run__name="r3-held").pk)  # the run's one segment
    assert held_job.result["replay"]["state"] == "PASS"
    tokens = sum(int(step_batch(s, B=B, T=T)["response_mask"].sum()) for s in (0, 1))
    assert held_job.result["pairs_verified"] == held_job.result["pairs"] == tokens * L
