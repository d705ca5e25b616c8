"""The runs table's MLflow-like columns: status, duration and tags, the column picker (``?cols=``, with config keys
as ``params.<key>`` columns, sortable), and a bad column refused by name."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from .test_runs_table_browser import synthetic_runs

pytestmark = pytest.mark.django_db


def names(html: str) -> list[str]:
    return re.findall(r'<td class="" data-column="name"><a href="[^"]+">([^<]+)</a>', html)


def headers(html: str) -> list[str]:
    return re.findall(r'<th scope="col"[^>]*data-column="([^"]+)"', html)


def declared(project):
    runs = synthetic_runs(project, 3)
    from audit_portal.runs.models import Run

    for i, run in enumerate(runs):
        Run.objects.filter(pk=run.pk).update(
            config={"lr": [1e-5, 3e-5, 1e-4][i], "optimizer": "adam" if i else "sgd", "bad key!": 1},
            tags=[["grpo", "rl"], ["rl"], []][i],
            state=["finished", "running", "failed"][i],
            updated_at=run.created_at + timedelta(seconds=[45, 3725, 0][i]),
        )
    return runs


def test_status_duration_and_tags_columns(client, owner, project):
    declared(project)
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/", {"cols": "status,duration,tags", "sort": "name"}).content.decode()
    assert headers(html) == ["name", "status", "duration", "tags"]
    assert re.findall(r'<td class="" data-column="status">([^<]*)<', html) == ["finished", "running", "failed"]
    assert re.findall(r'<td class="" data-column="duration">([^<]*)<', html) == ["45 s", "1 h 02 min", "0 s"]
    assert html.count('data-tag="rl"') == 2 and html.count('data-tag="grpo"') == 1
    got = names(client.get(f"/p/{project.slug}/runs/", {"sort": "-duration"}).content.decode())
    assert got == ["sweep-01", "sweep-00", "sweep-02"]


def test_default_columns_and_picker_offers_config_keys(client, owner, project):
    declared(project)
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/").content.decode()
    assert "status" not in headers(html) and "params.lr" not in headers(html) and "verdict" in headers(html)
    # every column and each usable top-level config key is offered; a key that could not be a column is not
    offered = re.findall(r'name="cols" value="([^"]+)"', html)
    assert {"status", "duration", "tags", "params.lr", "params.optimizer"} <= set(offered)
    assert not any("bad key" in o for o in offered)


def test_params_columns_show_and_sort(client, owner, project):
    declared(project)
    client.force_login(owner)
    html = client.get(
        f"/p/{project.slug}/runs/", [("cols", "params.lr"), ("cols", "params.optimizer"), ("sort", "-params.lr")]
    ).content.decode()
    assert headers(html) == ["name", "params.lr", "params.optimizer"]
    assert names(html) == ["sweep-02", "sweep-01", "sweep-00"]
    assert re.findall(r'<td class="" data-column="params.optimizer">([^<]*)<', html) == ["adam", "adam", "sgd"]
    # the sort links keep the picked columns
    assert "cols=params.lr&amp;cols=params.optimizer" in html


def test_bad_column_is_refused_by_name(client, owner, project):
    declared(project)
    client.force_login(owner)
    resp = client.get(f"/p/{project.slug}/runs/", {"cols": "password"})
    assert resp.status_code == 400 and "cols: no column &#x27;password&#x27;" in resp.content.decode()
    assert client.get(f"/p/{project.slug}/runs/", {"sort": "params.a;drop"}).status_code == 400


def test_export_carries_status_duration_tags_config(client, owner, project):
    declared(project)
    client.force_login(owner)
    data = json.loads(
        b"".join(client.get(f"/p/{project.slug}/runs/", {"format": "json", "sort": "name"}).streaming_content)
    )
    assert [r["duration"] for r in data] == [45.0, 3725.0, 0.0] and data[0]["tags"] == ["grpo", "rl"]
    assert data[1]["config"]["optimizer"] == "adam" and data[2]["status"] == "failed"
    csv_text = b"".join(
        client.get(f"/p/{project.slug}/runs/", {"format": "csv", "sort": "name"}).streaming_content
    ).decode()
    assert '"[""grpo"",""rl""]"' in csv_text
