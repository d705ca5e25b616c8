"""Several processes (ranks) of one run stream segments of the same steps (issue 29, "a rank per process, merged by
step on the server"): the live view holds (rank, step) pairs, so rank 1's sequences of step 3 merge into step 3 next
to rank 0's, and the merged view equals the one-pass certificate of every rank's records together; only the same
rank sending a step again is refused."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit_portal.core.storage import artifact_path
from audit_portal.live import services as live_services
from audit_portal.live.models import LiveRun, LiveSegment
from audit_portal.runs.models import Upload

from ..conftest import upload_url
from ..live_steps import write_steps

pytestmark = pytest.mark.django_db(transaction=True)


def post(api, project, path, steps, rank=None):
    with open(path, "rb") as fh:
        data = {"file": fh, "steps": steps, **({"rank": rank} if rank is not None else {})}
        return api.post(upload_url(project), data, format="multipart")


def process(upload_id):
    from .test_live_runs import process as run_jobs

    return run_jobs(upload_id)


def test_a_rank_is_a_number_or_refused_before_anything_is_stored(api, project, tmp_path):
    assert live_services.parse_rank(None) is None and live_services.parse_rank("") is None
    assert live_services.parse_rank(" 3 ") == 3 and live_services.parse_rank("0") == 0
    path = write_steps(tmp_path / "seg.parquet", "grow", [0], rank=2)
    for bad in ("-1", "a", "1.5", "1234567"):
        r = post(api, project, path, "0", rank=bad)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_rank", (bad, r.content)
    assert not Upload.objects.exists()
    up = post(api, project, path, "0", rank="2").json()["id"]
    assert LiveSegment.objects.get(upload_id=up).rank == 2
    plain = post(api, project, write_steps(tmp_path / "r0.parquet", "grow", [0]), "0").json()["id"]
    assert LiveSegment.objects.get(upload_id=plain).rank == 0  # no rank declared: rank 0


def test_two_ranks_merge_by_step_into_the_one_pass_certificate(api, project, tmp_path):
    from workers.certify import certify_file

    order = [(0, [0, 1]), (1, [0]), (1, [1, 2]), (0, [2])]  # interleaved: each rank's steps in its own segments
    ids = []
    for rank, steps in order:
        path = write_steps(tmp_path / f"r{rank}-{steps[0]}.parquet", "grow", steps, noise=0.002 * (1 + rank), rank=rank)
        ids.append(post(api, project, path, f"{steps[0]}-{steps[-1]}", rank=str(rank)).json()["id"])
        process(ids[-1])
    live = LiveRun.objects.get(run__name="grow")
    assert live.uploads == ids and live.skipped == []
    assert live.steps == [0, 1, 2] and live.ranks == {"0": [0, 1, 2], "1": [0, 1, 2]}
    whole = tmp_path / "whole.parquet"  # every rank's records, as uploaded, in one file
    pq.write_table(
        pa.concat_tables([pq.read_table(artifact_path(Upload.objects.get(pk=i).storage_name)) for i in ids]), whole
    )
    one = certify_file(whole)
    for key in ("summary", "bounds", "steps", "length_buckets", "budget"):
        assert live.certificate[key] == one[key], key
    assert one["summary"]["sequences"] == 2 * 3 * 4  # two ranks × three steps × four sequences, none dropped
    assert [r["sequences"] for r in live.certificate["steps"]] == [8, 8, 8]  # each step: both ranks' sequences
    view = api.get(f"/api/v1/runs/{live.run_id}/live/").json()
    assert view["steps"] == 3 and view["series"]["step"] == [0, 1, 2]
    assert view["ranks"] == [{"rank": 0, "steps": 3, "ranges": [[0, 2]]}, {"rank": 1, "steps": 3, "ranges": [[0, 2]]}]

    # rank 1 sends step 1 again (a resumed process): refused, nothing counted twice; rank 2's step 1 is new
    again = post(
        api, project, write_steps(tmp_path / "again.parquet", "grow", [1], noise=0.01, rank=1), "1", rank="1"
    ).json()["id"]
    process(again)
    third = post(api, project, write_steps(tmp_path / "r2.parquet", "grow", [1], rank=2), "1", rank="2").json()["id"]
    process(third)
    live = LiveRun.objects.get(pk=live.pk)
    reasons = {s["upload"]: s["reason"] for s in live.skipped}
    assert "steps 1–1 of rank 1 are already in the live view" in reasons[again] and third not in reasons
    assert live.uploads == [*ids, third] and live.ranks["2"] == [1] and live.steps == [0, 1, 2]
    assert live.certificate["summary"]["sequences"] == 2 * 3 * 4 + 4
    assert [r["sequences"] for r in live.certificate["steps"]] == [8, 12, 8]


def test_the_consistency_check_sees_ranks_that_disagree_with_the_steps(api, project, tmp_path):
    from audit_portal.jobs.consistency import check

    first = post(api, project, write_steps(tmp_path / "a.parquet", "grow", [0, 1], rank=1), "0-1", rank="1")
    process(first.json()["id"])
    assert check(rehash=False, project=project).ok, check(rehash=False, project=project).problems
    LiveRun.objects.filter(run__name="grow").update(ranks={"1": [0]})
    problems = check(rehash=False, project=project).problems
    assert any("its ranks hold 1 steps, 2 recorded as merged" in p for p in problems), problems


def test_the_engine_merges_two_ranks_parts_of_the_same_steps_by_adding(tmp_path):
    """workers/certify/partial.py: the same step in two parts adds up (counts, exact sums, maxima) — two ranks'
    partials merged give the one-pass certificate of both ranks' records in one file, bit for bit."""
    from workers.certify.file import certify_file, certify_part, plan_certificate, summarise
    from workers.certify.partial import Partial

    r0 = write_steps(tmp_path / "r0.parquet", "grow", [0, 1, 2])
    r1 = write_steps(tmp_path / "r1.parquet", "grow", [0, 1, 2], noise=0.006, rank=1)
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.concat_tables([pq.read_table(r1), pq.read_table(r0)]), whole)
    plan = plan_certificate(r0)
    a, b = certify_part(r0, plan), certify_part(r1, plan)
    merged = summarise(Partial.from_json(Partial.merged([a, b]).to_json()), plan)
    one = certify_file(whole)
    for key in ("summary", "bounds", "steps", "length_buckets", "budget"):
        assert merged[key] == one[key], key
    alone = summarise(a, plan)
    for got, mine in zip(merged["steps"], alone["steps"]):
        assert got["step"] == mine["step"] and got["sequences"] == 2 * mine["sequences"]
        assert got["eps_hat_max"] >= mine["eps_hat_max"]


def test_views_merged_before_ranks_hold_their_steps_as_rank_0(project):
    """Migration live 0004_live_ranks: a view merged by one process before ranks existed keeps refusing its own
    steps again (as rank 0's) and still takes another rank's."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from audit_portal.runs.models import Run

    executor = MigrationExecutor(connection)
    executor.migrate([("live", "0003_live_verdict")])
    old = executor.loader.project_state([("live", "0003_live_verdict")]).apps.get_model("live", "LiveRun")
    run = Run.objects.create(project=project, name="old")
    old.objects.create(run_id=run.pk, steps=[0, 1, 2], uploads=[1])
    empty = Run.objects.create(project=project, name="empty")
    old.objects.create(run_id=empty.pk)
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    live = LiveRun.objects.get(run=run)
    assert live.ranks == {"0": [0, 1, 2]} and LiveRun.objects.get(run=empty).ranks == {}
    assert "of rank 0 are already in the live view" in live_services.refusal(live, 2, [2, 3], (2, 3))
    assert live_services.refusal(live, 2, [2, 3], (2, 3), rank=1) is None
