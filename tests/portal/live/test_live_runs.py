"""Runs that grow while they train (issue 18 part 3): uploads declared as a step range are merged into the run's live
view — each segment certified on its own into a partial and merged, earlier steps never read again — and the merged
view equals the certificate of the whole run in one pass; a whole-run upload or a repeated step range is not counted
twice; the run's websocket pushes each merge and each alert."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from audit_portal.accounts.models import Role
from audit_portal.alerts import services as alert_services
from audit_portal.certificates.models import RunCertificate
from audit_portal.jobs.models import Job
from audit_portal.live import services as live_services
from audit_portal.live.models import LiveRun, LiveSegment
from audit_portal.routing import websocket_urlpatterns
from audit_portal.runs.models import Upload

from ..conftest import upload_url
from ..live_steps import write_steps

pytestmark = pytest.mark.django_db(transaction=True)


def test_step_ranges_parse_or_are_refused():
    assert live_services.parse_step_range(None) is None and live_services.parse_step_range("") is None
    assert live_services.parse_step_range("7") == (7, 7) and live_services.parse_step_range(" 16-23 ") == (16, 23)
    for bad in ("3-2", "-1", "a-b", "1-2-3", "1" * 13, ["1"]):
        with pytest.raises(Exception) as exc:
            live_services.parse_step_range(bad)
        assert (
            exc.value.default_code == "invalid_step_range"
            or getattr(exc.value, "get_codes", lambda: "")() == "invalid_step_range"
        )


def post(api, project, path, steps=None):
    with open(path, "rb") as fh:
        data = {"file": fh, **({"steps": steps} if steps is not None else {})}
        return api.post(upload_url(project), data, format="multipart")


def process(upload_id, validate=True):
    """The upload's jobs run inline, as a worker would: validate, certify, then the certificate's follow-up."""
    import pipelines as tasks

    if validate:
        assert tasks.validate_upload(Job.objects.get(subject_id=upload_id, kind="validate_upload").pk) == "succeeded"
    assert tasks.certify_upload(Job.objects.get(subject_id=upload_id, kind="certify_upload").pk) == "succeeded"
    certificate = RunCertificate.objects.get(upload_id=upload_id)
    return tasks.run_certificate_completed(certificate_id=certificate.pk)


def test_an_upload_declares_its_step_range_and_a_bad_one_stores_nothing(api, project, tmp_path):
    path = write_steps(tmp_path / "seg.parquet", "grow", [0, 1])
    bad = post(api, project, path, steps="5-1")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_step_range"
    assert not Upload.objects.exists()
    r = post(api, project, path, steps="0-1")
    assert r.status_code == 201
    seg = LiveSegment.objects.get(upload_id=r.json()["id"])
    assert (seg.first_step, seg.last_step) == (0, 1)


def test_segments_merge_into_the_one_pass_certificate_without_reading_earlier_steps_again(
    api, project, tmp_path, monkeypatch
):
    import workers.certify.file as engine
    from workers.certify import certify_file

    read = []
    real = engine.certify_part
    monkeypatch.setattr(
        engine, "certify_part", lambda path, plan, *a, **k: read.append(str(path)) or real(path, plan, *a, **k)
    )
    ids = []
    for steps in ([0, 1], [2, 3], [4]):
        path = write_steps(tmp_path / f"seg-{steps[0]}.parquet", "grow", steps, noise=0.002 * (1 + steps[0]))
        ids.append(post(api, project, path, steps=f"{steps[0]}-{steps[-1]}").json()["id"])
        before = len(read)
        process(ids[-1])
        live = LiveRun.objects.get(run__name="grow")
        assert live.steps == list(range(steps[-1] + 1)) and live.uploads == ids
        mine = Upload.objects.get(pk=ids[-1]).storage_name
        # the follow-up certified this segment only (the certify job itself ran certify_file on it before)
        assert [p for p in read[before:] if not p.endswith(mine)] == []
    # the merged view is the whole run certified in one pass (exact sums: equal, not close)
    import pyarrow as pa
    import pyarrow.parquet as pq

    from audit_portal.core.storage import artifact_path

    tables = [pq.read_table(artifact_path(Upload.objects.get(pk=i).storage_name)) for i in ids]
    whole = tmp_path / "whole.parquet"  # the segments' bytes as uploaded, as one file
    pq.write_table(pa.concat_tables(tables), whole)
    one = certify_file(whole)
    merged = live.certificate
    for key in ("summary", "bounds", "steps", "length_buckets", "budget"):
        assert merged[key] == one[key], key
    assert merged["summary"]["sequences"] == 5 * 4 and merged["bounds"]["best"] is not None
    view = live_services.live_json(live)
    assert view["series"]["step"] == [0, 1, 2, 3, 4] and len(view["series"]["abs_diff_mean"]) == 5
    assert view["series"]["abs_diff_mean"][4] > view["series"]["abs_diff_mean"][0]  # the noise grew


def test_a_whole_run_upload_and_repeated_steps_are_not_counted_twice(api, project, tmp_path):
    first = post(api, project, write_steps(tmp_path / "a.parquet", "grow", [0, 1]), steps="0-1").json()["id"]
    import pipelines as tasks

    tasks.validate_upload(Job.objects.get(subject_id=first, kind="validate_upload").pk)
    run_id = Upload.objects.get(pk=first).run_id
    assert api.get(f"/api/v1/runs/{run_id}/live/").status_code == 404  # nothing streamed yet
    process(first, validate=False)
    got = api.get(f"/api/v1/runs/{run_id}/live/").json()
    assert got["steps"] == 2 and got["series"]["step"] == [0, 1] and got["summary"]["sequences"] == 8
    # the whole run, as Run.finish uploads it: no step range declared, so the live view leaves it alone
    whole = post(api, project, write_steps(tmp_path / "w.parquet", "grow", [0, 1, 2])).json()["id"]
    process(whole)
    # steps 1-2 again, declared: step 1 is already there
    again = post(api, project, write_steps(tmp_path / "b.parquet", "grow", [1, 2], noise=0.01), steps="1-2").json()[
        "id"
    ]
    process(again)
    # declared 9-9 but holds step 3
    liar = post(api, project, write_steps(tmp_path / "c.parquet", "grow", [3]), steps="9").json()["id"]
    process(liar)
    live = LiveRun.objects.get(run__name="grow")
    assert live.steps == [0, 1] and live.uploads == [first] and live.certificate["summary"]["sequences"] == 8
    reasons = {s["upload"]: s["reason"] for s in live.skipped}
    assert whole not in reasons and "already in the live view" in reasons[again]
    assert "outside the declared range 9–9" in reasons[liar]
    assert {s["upload"] for s in api.get(f"/api/v1/runs/{run_id}/live/").json()["skipped"]} == {again, liar}
    tasks.run_certificate_completed(certificate_id=RunCertificate.objects.get(upload_id=first).pk)  # redelivered
    assert LiveRun.objects.get(pk=live.pk).uploads == [first]


def communicator(path, user):
    com = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    com.scope["user"] = user
    return com


def test_the_run_socket_sends_the_view_then_each_merge_and_each_alert(
    api, project, owner, tmp_path, settings, other_project, member_of
):
    settings.PROGRESS_POLL_SECONDS = 0  # only pushed events
    first = post(api, project, write_steps(tmp_path / "a.parquet", "grow", [0]), steps="0").json()["id"]
    import pipelines as tasks

    tasks.validate_upload(Job.objects.get(subject_id=first, kind="validate_upload").pk)
    run = Upload.objects.get(pk=first).run
    stranger = member_of(other_project, Role.OWNER, username="stranger")

    async def scenario():
        for user, code in ((stranger, 4404), (AnonymousUser(), 4401)):
            com = communicator(f"/ws/runs/{run.pk}/live/", user)
            assert (await com.connect()) == (False, code)
            await com.disconnect()
        com = communicator(f"/ws/runs/{run.pk}/live/", owner)
        assert (await com.connect())[0]
        assert await com.receive_json_from(timeout=5) == {"type": "live", "live": None}  # nothing merged yet
        await database_sync_to_async(alert_services.create_rule)(
            project=project, created_by="t", data={"name": "tiny budget", "kind": "budget", "threshold": 1e-9}
        )
        await database_sync_to_async(process)(first, validate=False)
        got = {}
        while len(got) < 2:
            msg = await com.receive_json_from(timeout=20)
            got[msg["type"]] = msg
        live, alert = got["live"]["live"], got["alert"]["alert"]
        assert live["steps"] == 1 and live["series"]["step"] == [0] and live["best_bound"] > 1e-9
        assert live["budgets"] == [{"rule": alert["rule"], "name": "tiny budget", "budget": 1e-9, "meets": False}]
        assert alert["kind"] == "fired" and alert["run"] == run.pk and "budget 1e-09" in alert["message"]
        await com.disconnect()

    async_to_sync(scenario)()


def test_the_sweep_finds_segments_whose_follow_up_never_ran(api, project, tmp_path):
    from datetime import timedelta

    from django.utils import timezone

    import pipelines as tasks

    seg = post(api, project, write_steps(tmp_path / "a.parquet", "grow", [0]), steps="0").json()["id"]
    tasks.validate_upload(Job.objects.get(subject_id=seg, kind="validate_upload").pk)
    tasks.certify_upload(Job.objects.get(subject_id=seg, kind="certify_upload").pk)  # its follow-up "lost"
    certificate = RunCertificate.objects.get(upload_id=seg)
    later = timezone.now() + timedelta(seconds=301)
    assert live_services.lost_segments() == []  # not overdue yet
    assert live_services.lost_segments(now=later) == [certificate.pk]
    tasks.run_certificate_completed(certificate_id=certificate.pk)  # what the sweep queues
    assert live_services.lost_segments(now=later) == []
    assert LiveRun.objects.get(run__name="grow").steps == [0]
    assert tasks.sweep_alerts() == {"deliveries": [], "follow_ups": []}  # the beat task itself: nothing overdue


def test_the_alerts_page_socket_hears_the_projects_events_and_refuses_strangers(
    project, owner, other_project, member_of, settings
):
    from audit_portal.runs.models import Run

    settings.PROGRESS_POLL_SECONDS = 0
    run = Run.objects.create(project=project, name="r")
    stranger = member_of(other_project, Role.OWNER, username="stranger")
    alert_services.create_rule(project=project, created_by="t", data={"name": "b", "kind": "budget", "threshold": 0.05})

    async def scenario():
        for user, code in ((stranger, 4404), (AnonymousUser(), 4401)):
            com = communicator(f"/ws/projects/{project.slug}/alerts/", user)
            assert (await com.connect()) == (False, code)
            await com.disconnect()
        com = communicator(f"/ws/projects/{project.slug}/alerts/", owner)
        assert (await com.connect())[0]
        snap = {"certified": True, "best_bound": 0.2, "steps": []}
        await database_sync_to_async(alert_services.evaluate_run)(run, snap)
        msg = await com.receive_json_from(timeout=10)
        assert msg["type"] == "alert" and msg["alert"]["kind"] == "fired" and msg["alert"]["run_name"] == "r"
        await database_sync_to_async(alert_services.evaluate_run)(run, snap)  # unchanged: nothing new
        assert await com.receive_nothing(timeout=0.5)
        await com.disconnect()

    async_to_sync(scenario)()


def test_the_consistency_check_sees_a_live_view_that_disagrees_with_itself_and_a_lost_follow_up(api, project, tmp_path):
    from datetime import timedelta

    from django.utils import timezone

    from audit_portal.jobs.consistency import check

    first = post(api, project, write_steps(tmp_path / "a.parquet", "grow", [0, 1]), steps="0-1").json()["id"]
    process(first)
    assert check(rehash=False, project=project).ok, check(rehash=False, project=project).problems
    live = LiveRun.objects.get(run__name="grow")
    LiveRun.objects.filter(pk=live.pk).update(steps=[0, 1, 2], uploads=[first, first])
    lost = post(api, project, write_steps(tmp_path / "b.parquet", "grow", [2]), steps="2").json()["id"]
    import pipelines as tasks

    tasks.validate_upload(Job.objects.get(subject_id=lost, kind="validate_upload").pk)
    tasks.certify_upload(Job.objects.get(subject_id=lost, kind="certify_upload").pk)  # no follow-up
    RunCertificate.objects.filter(upload_id=lost).update(completed_at=timezone.now() - timedelta(hours=1))
    problems = check(rehash=False, project=project).problems
    assert any("3 steps recorded as merged, its certificate shows 2" in p for p in problems), problems
    assert any("merged twice" in p for p in problems) and any(f"segment upload {lost}" in p for p in problems)


def test_the_sweep_never_requeues_a_plain_upload(api, project, tmp_path, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    import pipelines as tasks
    from audit_portal.alerts import signals

    queued = []
    monkeypatch.setattr(signals, "send_task", lambda name, kwargs: queued.append((name, kwargs)))
    whole = post(api, project, write_steps(tmp_path / "whole.parquet", "whole", [0, 1])).json()["id"]  # no steps=
    seg = post(api, project, write_steps(tmp_path / "seg.parquet", "grow", [0]), steps="0").json()["id"]
    for upload_id in (whole, seg):
        tasks.validate_upload(Job.objects.get(subject_id=upload_id, kind="validate_upload").pk)
        tasks.certify_upload(Job.objects.get(subject_id=upload_id, kind="certify_upload").pk)
    segment_certificate = RunCertificate.objects.get(upload_id=seg).pk
    queued.clear()  # the follow-ups queued on completion (their messages "lost": never run)
    for minutes in (6, 7, 8, 30):  # several sweeps, all past the overdue mark
        later = timezone.now() + timedelta(minutes=minutes)
        for pk in live_services.lost_segments(now=later):
            signals.send_follow_up(pk)
    assert [kwargs["certificate_id"] for _, kwargs in queued] == [segment_certificate] * 4  # never the plain one
    tasks.run_certificate_completed(certificate_id=segment_certificate)  # the follow-up finally runs
    queued.clear()
    for minutes in (6, 7, 8):
        for pk in live_services.lost_segments(now=timezone.now() + timedelta(minutes=minutes)):
            signals.send_follow_up(pk)
    assert queued == []
