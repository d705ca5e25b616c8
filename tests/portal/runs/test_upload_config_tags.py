"""Run config and tags given with an upload (issue 28; audit_portal/runs/declarations.py): stored with the upload, merged
into its run when its validation finds it valid (keys updated, tags added in order without duplicates), refused by
field name before anything is stored, carried by a resumable upload's session, and neither lost nor doubled when the
same bytes are uploaded again."""

from __future__ import annotations

import hashlib
import json

import pytest

from audit_portal.jobs.models import Job
from audit_portal.runs import chunked
from audit_portal.runs.models import Run, Upload, UploadSession

from ..conftest import as_file, jsonl, records, stored_files, upload_url

pytestmark = pytest.mark.django_db
PART = 4096


def validate(upload_id: int) -> Upload:
    from pipelines import validate_upload

    job = Job.objects.get(subject_id=upload_id, kind="validate_upload")
    assert validate_upload(job.pk) == "succeeded"
    return Upload.objects.select_related("run").get(pk=upload_id)


def post(api, project, data: bytes, **fields):
    return api.post(upload_url(project), {"file": as_file(data), **fields}, format="multipart")


def test_config_and_tags_are_stored_and_reach_the_run_when_valid(api, project):
    data = jsonl(records(trajectories=3))
    r = post(api, project, data, config=json.dumps({"lr": 3e-6, "layers": [4, 8], "algo": "grpo"}), tags="7b, grpo")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["config"] == {"lr": 3e-6, "layers": [4, 8], "algo": "grpo"} and body["tags"] == ["7b", "grpo"]
    upload = Upload.objects.get(pk=body["id"])
    assert upload.run is None  # not applied before validation
    upload = validate(upload.pk)
    assert upload.stage == "valid"
    assert upload.run.config == {"lr": 3e-6, "layers": [4, 8], "algo": "grpo"}
    assert upload.run.tags == ["7b", "grpo"]


def test_a_second_upload_updates_keys_and_adds_tags_in_order(api, project):
    run_id = "merge-run"
    first = post(
        api,
        project,
        jsonl(records(trajectories=3, run_id=run_id)),
        config='{"lr": 1e-6, "seed": 1}',
        tags='["grpo", "7b"]',
    )
    run = validate(first.json()["id"]).run
    assert run.name == run_id and run.tags == ["grpo", "7b"]
    second = post(
        api,
        project,
        jsonl(records(trajectories=3, seed=2, run_id=run_id)),
        config='{"seed": 2, "kl": 0.1}',
        tags='["7b", "long-ctx", "grpo"]',
    )
    assert second.status_code == 201, second.content
    assert validate(second.json()["id"]).run.pk == run.pk
    run.refresh_from_db()
    assert run.config == {"lr": 1e-6, "seed": 2, "kl": 0.1}
    assert run.tags == ["grpo", "7b", "long-ctx"]


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"config": "{not json"}, "config"),
        ({"config": "[1, 2]"}, "config"),
        ({"config": json.dumps({f"k{i}": i for i in range(257)})}, "config"),
        ({"config": json.dumps({"k": "x" * (65 * 1024)})}, "config"),
        ({"config": json.dumps({"nested": [{"a": 1}]})}, "config"),
        ({"config": json.dumps({"a": {"b": 1}, "a.b": 2})}, "config"),
        ({"config": "[" * 100_000}, "config"),
        ({"config": json.dumps({"long": list(range(65))})}, "config"),
        ({"config": json.dumps({"k": "a\x00b"})}, "config"),
        ({"tags": json.dumps([f"t{i}" for i in range(33)])}, "tags"),
        ({"tags": "ok," + "x" * 65}, "tags"),
        ({"tags": "[1, 2]"}, "tags"),
        ({"tags": "[broken"}, "tags"),
    ],
)
def test_a_bad_value_is_refused_by_field_and_stores_nothing(api, project, settings, fields, field):
    r = post(api, project, jsonl(records(trajectories=2)), **fields)
    assert r.status_code == 400, r.content
    error = r.json()["error"]
    assert error["detail"]["field"] == field and error["code"] == f"invalid_upload_{field}"
    assert error["message"].startswith(f"{field}: ")
    assert not Upload.objects.exists() and not Job.objects.exists()
    assert stored_files(settings) == []  # not even the received file in incoming/


def test_nested_sections_become_dotted_keys(api, project):
    config = {"optim": {"lr": 1e-6, "betas": [0.9, 0.95]}, "model": {"name": "qwen", "moe": {"experts": 64}}}
    r = post(api, project, jsonl(records(trajectories=2)), config=json.dumps(config))
    assert r.status_code == 201, r.content
    flat = {"optim.lr": 1e-6, "optim.betas": [0.9, 0.95], "model.name": "qwen", "model.moe.experts": 64}
    assert r.json()["config"] == flat


def test_limits_themselves_are_accepted(api, project):
    config = {f"k{i}": "v" for i in range(256)}
    tags = [f"{i:02d}" + "t" * 62 for i in range(32)]
    r = post(api, project, jsonl(records(trajectories=2)), config=json.dumps(config), tags=json.dumps(tags))
    assert r.status_code == 201, r.content
    assert r.json()["config"] == config and r.json()["tags"] == tags


def test_a_duplicate_upload_neither_loses_nor_doubles_tags(api, project):
    data = jsonl(records(trajectories=3))
    first = post(api, project, data, tags="grpo,7b", config='{"lr": 1}')
    upload_id = first.json()["id"]
    # the same bytes before validation: its tags wait for the first upload to join its run
    early = post(api, project, data, tags="grpo,early")
    assert early.status_code == 200 and early.json()["id"] == upload_id
    run = validate(upload_id).run
    assert run.tags == ["grpo", "7b", "early"] and run.config == {"lr": 1}
    # after validation: applied at once; the same tags again change nothing
    late = post(api, project, data, tags="7b,late", config='{"lr": 2}')
    assert late.status_code == 200 and late.json()["id"] == upload_id
    same = post(api, project, data, tags="grpo,7b")
    assert same.status_code == 200
    run.refresh_from_db()
    assert run.tags == ["grpo", "7b", "early", "late"] and run.config == {"lr": 2}
    dups = Upload.objects.filter(duplicate_of_id=upload_id).order_by("id")
    assert [d.tags for d in dups] == [["grpo", "early"], ["7b", "late"], ["grpo", "7b"]]


def test_an_upload_without_them_leaves_the_runs_declarations(api, project):
    run = Run.objects.create(project=project, name="declared", config={"lr": 5}, tags=["kept"])
    r = post(api, project, jsonl(records(trajectories=2, run_id="declared")))
    assert r.status_code == 201 and r.json()["config"] == {} and r.json()["tags"] == []
    assert validate(r.json()["id"]).run.pk == run.pk
    run.refresh_from_db()
    assert run.config == {"lr": 5} and run.tags == ["kept"]


@pytest.fixture
def small_parts(monkeypatch):
    monkeypatch.setattr(chunked, "PART_BYTES", PART)


def test_a_resumable_upload_carries_them_to_the_run(api, project, small_parts):
    data = jsonl(records(trajectories=4))
    body = {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "name": "run.jsonl",
        "config": {"lr": 2e-6},
        "tags": ["parts", "grpo"],
    }
    created = api.post(f"/api/v1/projects/{project.slug}/upload-sessions/", body, format="json")
    assert created.status_code == 201, created.content
    session = created.json()
    assert session["config"] == {"lr": 2e-6} and session["tags"] == ["parts", "grpo"]
    for n in range(session["part_count"]):
        part = data[n * PART : (n + 1) * PART]
        url = f"/api/v1/upload-sessions/{session['id']}/parts/{n}/"
        assert api.generic("PUT", url, part, content_type="application/octet-stream").status_code == 200
    done = api.post(f"/api/v1/upload-sessions/{session['id']}/complete/")
    assert done.status_code == 201, done.content
    assert done.json()["tags"] == ["parts", "grpo"]
    run = validate(done.json()["id"]).run
    assert run.config == {"lr": 2e-6} and run.tags == ["parts", "grpo"]


@pytest.mark.parametrize(
    "extra,field",
    [({"config": "lr=1"}, "config"), ({"config": {"a": [{"b": 1}]}}, "config"), ({"tags": [""]}, "tags")],
)
def test_a_resumable_session_refuses_bad_values_by_field(api, project, settings, extra, field):
    body = {"size": 10, "name": "run.jsonl", **extra}
    r = api.post(f"/api/v1/projects/{project.slug}/upload-sessions/", body, format="json")
    assert r.status_code == 400 and r.json()["error"]["detail"]["field"] == field
    assert not UploadSession.objects.exists() and stored_files(settings) == []


# ------------------------------------------------------------------ declared by the log itself (docs/fcr.md)
def declaring(config=None, tags=None, run_id="log-run", **kw) -> list[dict]:
    recs = records(trajectories=3, run_id=run_id, **kw)
    for r in recs:
        if config is not None:
            r["run_config"] = config
        if tags is not None:
            r["run_tags"] = tags
    return recs


def test_config_and_tags_in_the_log_reach_the_run_api_and_table(api, client, owner, project):
    r = post(api, project, jsonl(declaring({"lr": 3e-6, "algo": "grpo", "optim": {"beta": 0.9}}, ["from-log", "grpo"])))
    assert r.status_code == 201, r.content
    upload = validate(r.json()["id"])
    assert upload.stage == "valid" and upload.validation["run_params"]["log-run"]["run_config"]["line"] == 1
    listed = api.get(f"/api/v1/projects/{project.slug}/runs/").json()
    row = next(x for x in (listed.get("results") or listed) if x["name"] == "log-run")
    assert row["config"] == {"lr": 3e-6, "algo": "grpo", "optim.beta": 0.9} and row["tags"] == ["from-log", "grpo"]
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/", {"cols": "params.algo,tags"}).content.decode()
    assert '<td class="" data-column="params.algo">grpo<' in html and 'data-tag="from-log"' in html


def test_the_uploads_own_fields_override_the_logs(api, project):
    data = jsonl(declaring({"lr": 1, "seed": 7}, ["log", "shared"]))
    r = post(api, project, data, config='{"lr": 2}', tags="shared,upload")
    run = validate(r.json()["id"]).run
    assert run.config == {"lr": 2, "seed": 7} and run.tags == ["log", "shared", "upload"]


@pytest.mark.parametrize(
    "config,tags,field",
    [
        ({"nested": [{"a": 1}]}, None, "run_config"),
        ({f"k{i}": i for i in range(257)}, None, "run_config"),
        (None, ["x" * 65], "run_tags"),
        (None, [f"t{i}" for i in range(33)], "run_tags"),
    ],
)
def test_a_bad_value_in_the_log_is_a_validation_error_naming_the_record(api, project, config, tags, field):
    recs = declaring(config, tags)
    r = post(api, project, jsonl(recs))
    upload = validate(r.json()["id"])
    assert upload.stage == "invalid" and upload.run is None and upload.error_count == 1
    error = upload.validation["errors"][0]
    assert (error["line"], error["call_id"], error["field"]) == (1, recs[0]["call_id"], field)
    assert not Run.objects.filter(name="log-run").exists()


def test_records_that_disagree_make_the_upload_invalid(api, project):
    recs = declaring({"lr": 1})
    recs[-1]["run_config"] = {"lr": 9}
    upload = validate(post(api, project, jsonl(recs)).json()["id"])
    assert upload.stage == "invalid" and upload.validation["errors"][0]["line"] == len(recs)
