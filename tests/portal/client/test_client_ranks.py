"""Issue 29, several processes of one run (a rank per process): ``Run(rank=…)`` objects writing the same steps —
two at once in one process, a third started after the first finished — each keep their own spool and send their
rank with every segment; the portal merges their sequences by step, and the live view (the run's certificate) is the
one-pass certificate of every rank's records together."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from celery.contrib.testing.worker import start_worker

from audit_portal.celery import app
from audit_portal.core.storage import artifact_path
from audit_portal.live.models import LiveRun, LiveSegment
from audit_portal.runs.models import Upload

from ..live_steps import step_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "client"))

from audit_portal_client import Client

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_ranks_of_one_run_in_one_process_all_reach_the_live_view(
    live_server, project, submit_token, tmp_path, monkeypatch
):
    import pipelines  # noqa: F401 - registers the Celery tasks the live worker runs
    from workers.certify import certify_file

    monkeypatch.setenv("AUDIT_PORTAL_SPOOL", str(tmp_path / "spools"))  # the default spool path of every rank
    client = Client(live_server.url, submit_token, timeout=10)
    with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=30):
        r0 = client.run(project.slug, "ddp", rank=0, segment_steps=2)
        r1 = client.run(project.slug, "ddp", rank=1, segment_steps=2)
        assert r0.spool.root != r1.spool.root and r0._run_id == r1._run_id
        with pytest.raises(ValueError, match="holds rank 1's segments, not rank 3's"):
            client.run(project.slug, "ddp", rank=3, spool_dir=r1.spool.root)  # a spool is one process's
        for step in range(3):  # each process logs its own batch of every step
            assert r0.log_step(step, **step_batch(step)) == 4
            assert r1.log_step(step, **step_batch(step, rank=1)) == 4
        first = r0.finish(timeout=240).certificate
        assert first["series"]["step"] == [0, 1, 2]
        # a process started once rank 0's steps are in the live view: they are not rank 2's, it logs them all
        r2 = client.run(project.slug, "ddp", rank=2, segment_steps=2)
        for step in range(2):
            assert r2.log_step(step, **step_batch(step, rank=2)) == 4
        assert r2.steps_skipped == 0
        r2.finish(timeout=240)
        last = r1.finish(timeout=240).certificate
    assert last["sequences"] == 4 * (3 + 3 + 2) and last["skipped"] == [] and last["series"]["step"] == [0, 1, 2]
    live = LiveRun.objects.get(run__name="ddp")
    assert live.ranks == {"0": [0, 1, 2], "1": [0, 1, 2], "2": [0, 1]}
    assert sorted(LiveSegment.objects.filter(upload__run__name="ddp").values_list("rank", flat=True)) == [0, 0, 1, 1, 2]
    assert [r["sequences"] for r in live.certificate["steps"]] == [12, 12, 8]  # every rank's sequences of a step
    uploads = Upload.objects.filter(run__name="ddp").order_by("pk")
    assert uploads.count() == 5  # the segments, each sent once
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.concat_tables([pq.read_table(artifact_path(u.storage_name)) for u in uploads]), whole)
    one = certify_file(whole)
    for key in ("summary", "bounds", "steps", "length_buckets", "budget"):
        assert live.certificate[key] == one[key], key
