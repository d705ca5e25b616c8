"""A trainer client starts (or resumes) its run by name before the first step — the key, URL and project are
checked at once and the run has a page from the start — declares its config and tags, and ends it finished or
failed with the steps it could not log (issue 29)."""

from __future__ import annotations

import pytest

from audit_portal.accounts.services import issue_api_key
from audit_portal.runs.models import Run

pytestmark = pytest.mark.django_db


def runs_url(project):
    return f"/api/v1/projects/{project.slug}/runs/"


def test_start_creates_then_resumes_the_same_run(api, project):
    r = api.post(runs_url(project), {"name": "grpo-1", "config": {"lr": 3e-6}, "tags": ["grpo", "7b"]}, format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["name"] == "grpo-1" and body["config"] == {"lr": 3e-6} and body["tags"] == ["grpo", "7b"]
    assert body["state"] == "running"
    again = api.post(runs_url(project), {"name": "grpo-1"}, format="json")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert again.json()["config"] == {"lr": 3e-6}  # not given: kept
    assert Run.objects.filter(project=project, name="grpo-1").count() == 1
    listed = api.get(runs_url(project)).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert any(row["tags"] == ["grpo", "7b"] for row in rows)


def test_a_nested_config_is_kept_as_dotted_keys_like_an_uploads(api, project):
    # one check for both doors (runs/declarations.py): the run start flattens as the upload does
    config = {"trainer": {"lr": 1e-6, "kl": {"coef": 0.1}}, "seed": 3}
    r = api.post(runs_url(project), {"name": "nested", "config": config}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["config"] == {"trainer.lr": 1e-6, "trainer.kl.coef": 0.1, "seed": 3}


@pytest.mark.parametrize(
    "body,code",
    [
        ({}, "invalid_run_name"),
        ({"name": ""}, "invalid_run_name"),
        ({"name": "x" * 201}, "invalid_run_name"),
        ({"name": "a", "config": [1]}, "invalid_run_config"),
        ({"name": "a", "tags": "t"}, "invalid_run_tags"),
        ({"name": "a", "tags": [""]}, "invalid_run_tags"),
        ({"name": "a", "config": {"x": "y" * 70000}}, "invalid_run_config"),
        ({"name": "a\x00b"}, "invalid_run_name"),
        ({"name": "a", "config": {"k": ["ok", "n\x00ul"]}}, "invalid_run_config"),
        ({"name": "a", "config": {"k\x00": 1}}, "invalid_run_config"),
        ({"name": "a", "tags": ["t\x00"]}, "invalid_run_tags"),
        ({"name": "a", "config": {"nested": [{"deep": 1}]}}, "invalid_run_config"),
        ({"name": "a", "config": {f"k{i}": i for i in range(257)}}, "invalid_run_config"),
        ({"name": "a", "tags": [f"t{i}" for i in range(33)]}, "invalid_run_tags"),
    ],
)
def test_bad_declarations_are_refused_with_their_field(api, project, body, code):
    r = api.post(runs_url(project), body, format="json")
    assert r.status_code == 400 and r.json()["error"]["code"] == code
    assert not Run.objects.exists()


def test_a_read_key_cannot_start_a_run_and_an_unknown_project_is_404(project, owner):
    from rest_framework.test import APIClient

    c = APIClient()
    c.credentials(
        HTTP_AUTHORIZATION="Bearer " + issue_api_key(project=project, name="r", scopes=["read"], created_by=owner).token
    )
    assert c.post(runs_url(project), {"name": "x"}, format="json").status_code == 403
    assert c.post("/api/v1/projects/no-such-project/runs/", {"name": "x"}, format="json").status_code == 404
    assert not Run.objects.exists()


def test_state_records_the_end_and_accumulates_missing_steps(api, project):
    run = api.post(runs_url(project), {"name": "gappy"}, format="json").json()
    url = f"/api/v1/runs/{run['id']}/state/"
    r = api.post(url, {"state": "failed", "missing_steps": [7, 3]}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "failed" and r.json()["missing_steps"] == [3, 7]
    r = api.post(url, {"state": "finished", "missing_steps": [3, 12]}, format="json")
    assert r.json()["state"] == "finished" and r.json()["missing_steps"] == [3, 7, 12]
    for bad in (
        {"state": "done"},
        {"state": "finished", "missing_steps": [-1]},
        {"state": "finished", "missing_steps": ["a"]},
        {"state": "finished", "missing_steps": [True]},
    ):
        assert api.post(url, bad, format="json").status_code == 400, bad
    assert Run.objects.get(pk=run["id"]).missing_steps == [3, 7, 12]


def test_the_run_page_shows_tags_config_and_missing_steps(api, client, owner, project):
    run = api.post(
        runs_url(project), {"name": "shown", "config": {"lr": "3e-6<x>"}, "tags": ["grpo"]}, format="json"
    ).json()
    api.post(f"/api/v1/runs/{run['id']}/state/", {"state": "finished", "missing_steps": [4, 9]}, format="json")
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/{run['id']}/").content.decode()
    assert 'data-tag="grpo"' in html and "3e-6&lt;x&gt;" in html
    assert 'id="missing-steps"' in html and "2 steps" in html and "4, 9" in html


def test_configs_stored_nested_before_are_flattened_by_the_migration(project):
    # runs/migrations/0006: a run started with a nested config before the one check flattened it
    import importlib

    from django.apps import apps

    migration = importlib.import_module("audit_portal.runs.migrations.0006_flat_run_config")
    nested = Run.objects.create(project=project, name="old", config={"optim": {"lr": 1e-6, "betas": [0.9]}, "seed": 1})
    flat = Run.objects.create(project=project, name="flat", config={"seed": 2})
    migration.flatten(apps, None)
    nested.refresh_from_db(), flat.refresh_from_db()
    assert nested.config == {"optim.lr": 1e-6, "optim.betas": [0.9], "seed": 1} and flat.config == {"seed": 2}
