"""Issue 29 against a running portal (pytest-django's live server, a real Celery worker): a real TRL GRPOTrainer
(tiny Llama from a config, CPU) killed at a step and resumed from its checkpoint in a new process gives the
certificate of the uninterrupted run; gradient accumulation logs micro-batches under one step and every segment
is merged into the live view (which is the run's certificate); a refused key fails at start and the same spool is
uploaded later with the right key by ``audit-portal sync``."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from celery.contrib.testing.worker import start_worker

from audit_portal.celery import app
from audit_portal.live import services as live_services
from audit_portal.runs.models import Run as PortalRun
from audit_portal.runs.models import Upload

from ..live_steps import step_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "client"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "client" / "tests"))

from audit_portal_client import Client, PortalError, PortalUnavailable
from audit_portal_client.cli import main as cli_main

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

NUMBERS = (
    "sequences",
    "tokens",
    "accepted",
    "acceptance_rate",
    "eps_hat",
    "delta_hat",
    "T_ref",
    "threshold",
    "data_errors",
)


def same_certificate(a: dict, b: dict):
    assert a["sequences"] > 0 and a["eps_hat"] is not None
    for k in NUMBERS:
        assert a[k] == (b[k] if b[k] is None else pytest.approx(b[k], rel=1e-12, abs=0)), k
    assert a["best_bound"] == pytest.approx(b["best_bound"], rel=1e-12)
    assert a["series"] == b["series"] and a["steps"] == b["steps"]


def test_trl_killed_and_resumed_from_its_checkpoint_certifies_like_an_uninterrupted_run(
    live_server, project, submit_token, tmp_path
):
    pytest.importorskip("trl")
    import pipelines  # noqa: F401 - registers the Celery tasks the live worker runs
    from tiny_grpo import tiny_grpo_trainer
    from transformers import TrainerCallback

    from audit_portal_client.integrations.trl import AuditPortalCallback

    class Killed(Exception):
        pass

    class Kill(TrainerCallback):  # the job is preempted as step 4 begins; it resumes from checkpoint-2
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 4:
                raise Killed

    client = Client(live_server.url, submit_token, timeout=10)
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=30):
        whole = client.run(project.slug, "trl-whole", spool_dir=tmp_path / "whole", segment_steps=2)
        trainer = tiny_grpo_trainer(tmp_path / "out-whole", max_steps=5, save_steps=2)
        cb = AuditPortalCallback(whole, finish_timeout=240).attach(trainer)
        trainer.train()
        expected = cb.result.certificate

        first = client.run(project.slug, "trl-resumed", spool_dir=tmp_path / "resumed", segment_steps=1)
        trainer = tiny_grpo_trainer(tmp_path / "out-resumed", max_steps=5, save_steps=2)
        AuditPortalCallback(first, finish_on_end=False).attach(trainer)
        trainer.add_callback(Kill())
        with pytest.raises(Killed):
            trainer.train()
        first._stop.set()  # the process dies: its uploader with it, the open segment (step 3) lost
        first._wake.set()
        first._thread.join()
        del first
        # a new process resumes the run and the trainer resumes from checkpoint-2: steps 2-4 run again
        second = client.run(project.slug, "trl-resumed", spool_dir=tmp_path / "resumed", segment_steps=1, resume=True)
        trainer = tiny_grpo_trainer(tmp_path / "out-resumed", max_steps=5, save_steps=2)
        cb2 = AuditPortalCallback(second, finish_timeout=240).attach(trainer)
        trainer.train(resume_from_checkpoint=str(tmp_path / "out-resumed" / "checkpoint-2"))
        resumed = cb2.result.certificate
    # steps 2-3 were spooled before the kill (the save at step 4 flushed them) and run again from checkpoint-2:
    # not logged twice
    assert second.steps_skipped == 2
    assert resumed["series"]["step"] == [0, 1, 2, 3, 4] and resumed["sequences"] == 5 * 4
    assert resumed["skipped"] == [] and expected["skipped"] == []
    same_certificate(resumed, expected)
    run = PortalRun.objects.get(project=project, name="trl-resumed")
    assert run.state == "finished" and run.missing_steps == []


def test_trl_gradient_accumulation_every_micro_batch_reaches_the_live_view(
    live_server, project, submit_token, tmp_path
):
    pytest.importorskip("trl")
    import pipelines  # noqa: F401 - registers the Celery tasks the live worker runs
    from tiny_grpo import tiny_grpo_trainer

    from audit_portal_client.integrations.trl import AuditPortalCallback

    client = Client(live_server.url, submit_token, timeout=10)
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=30):
        run = client.run(project.slug, "trl-accum", spool_dir=tmp_path / "spool", segment_steps=2)
        trainer = tiny_grpo_trainer(tmp_path / "out", max_steps=3, gradient_accumulation_steps=3)
        cb = AuditPortalCallback(run, finish_timeout=240).attach(trainer)
        trainer.train()
    c = cb.result.certificate
    assert cb.batches_logged == 9  # 3 steps x 3 micro-batches, each logged under its optimisation step
    assert c["series"]["step"] == [0, 1, 2] and c["sequences"] == 9 * 4 and c["skipped"] == []
    segs = Upload.objects.filter(project=project, run__name="trl-accum")
    assert segs.count() == 2 and sum(u.validation["records"] for u in segs) == 36


@pytest.mark.parametrize("accumulation", [1, 2, 3, 4])
@pytest.mark.parametrize("segment_steps", [1, 2, 3, 4, 5])
def test_the_portal_merges_every_segment_the_client_cuts(tmp_path, accumulation, segment_steps):
    """The live view's own rule (live.services.refusal) on the client's segments, for accumulation 1-4 x segment
    sizes 1-5: none is left out, so the live view holds every record the run logged."""
    import pyarrow.parquet as pq

    c = Client("http://127.0.0.1:9", "x")
    c._request = lambda *a, **k: (_ for _ in ()).throw(PortalUnavailable("down"))
    run = c.run("p", "acc", spool_dir=tmp_path, live=False, segment_steps=segment_steps)
    logged = 0
    for step in range(9):
        for micro in range(accumulation):
            logged += run.log_step(step, **step_batch(step * 10 + micro))
    run.flush()
    live = SimpleNamespace(uploads=[], steps=[], ranks={})
    merged = 0
    for i, seg in enumerate(sorted(tmp_path.glob("seg-*.parquet"))):
        t = pq.read_table(seg)
        steps = t.column("step").to_pylist()
        assert live_services.refusal(live, i, steps, (min(steps), max(steps))) is None
        live.uploads.append(i)
        live.steps = sorted(set(live.steps) | set(steps))
        live.ranks["0"] = live.steps
        merged += t.num_rows
    assert merged == logged == 9 * accumulation * 4 and live.steps == list(range(9))


def test_a_refused_key_fails_at_start_and_the_same_spool_syncs_with_the_right_key(
    live_server, project, submit_token, tmp_path, capsys
):
    import pipelines  # noqa: F401 - registers the Celery tasks the live worker runs

    with pytest.raises(PortalError, match="401") as refused:
        Client(live_server.url, "not-a-key").run(project.slug, "keyed", spool_dir=tmp_path / "spool")
    assert refused.value.payload.get("error")  # the portal's body travels with the error
    with pytest.raises(PortalError, match="404"):
        Client(live_server.url, submit_token).run("no-such-project", "keyed", spool_dir=tmp_path / "x")
    # a job that started offline with a wrong key: steps are spooled, the refusal stops uploads, nothing is lost
    c = Client(live_server.url, "not-a-key", timeout=5)
    real = c._request
    c._request = lambda *a, **k: (_ for _ in ()).throw(PortalUnavailable("down"))
    run = c.run(project.slug, "keyed", spool_dir=tmp_path / "spool", live=False, segment_steps=2)
    c._request = real  # the portal is back: the key is refused
    for step in range(5):
        run.log_step(step, **step_batch(step))
    with pytest.raises(PortalError, match="401.*nothing is lost"):
        run.finish(timeout=30)
    assert len(list((tmp_path / "spool").glob("seg-*.parquet"))) == 3 and not run.status()["rejected"]
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=30):
        code = cli_main(
            ["--url", live_server.url, "--api-key", submit_token, "sync", str(tmp_path / "spool"), "--timeout", "240"]
        )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "5 step(s), 20 sequence(s)" in out.out and "missing steps: none" in out.out
    assert not list((tmp_path / "spool").glob("seg-*.parquet"))
    assert PortalRun.objects.get(project=project, name="keyed").state == "finished"
    assert np.isfinite(PortalRun.objects.get(project=project, name="keyed").live.certificate["bounds"]["best"])


def test_trl_with_a_full_disk_trains_on_and_the_certificate_names_the_missing_steps(
    live_server, project, submit_token, tmp_path, monkeypatch
):
    pytest.importorskip("trl")
    import errno

    import pyarrow.parquet as pq
    import pipelines  # noqa: F401 - registers the Celery tasks the live worker runs
    from tiny_grpo import tiny_grpo_trainer

    from audit_portal_client import run as run_module
    from audit_portal_client.integrations.trl import AuditPortalCallback

    real = pq.write_table

    def write_table(table, where, **kw):  # the disk is full while step 1's segment is written
        if 1 in table.column("step").to_pylist():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(table, where, **kw)

    monkeypatch.setattr(run_module.pq, "write_table", write_table)
    client = Client(live_server.url, submit_token, timeout=10)
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=30):
        run = client.run(project.slug, "trl-full-disk", spool_dir=tmp_path / "spool", segment_steps=1)
        trainer = tiny_grpo_trainer(tmp_path / "out", max_steps=3)
        cb = AuditPortalCallback(run, finish_timeout=240).attach(trainer)
        trainer.train()  # never raised
    assert trainer.state.global_step == 3
    c = cb.result.certificate
    assert c["missing_steps"] == [1] and c["series"]["step"] == [0, 2] and c["sequences"] == 8
    assert PortalRun.objects.get(project=project, name="trl-full-disk").missing_steps == [1]
