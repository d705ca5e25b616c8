"""The runs table's search language (dashboards/search.py) on the page and in the API list's ``q``: conditions over
columns, config (``params.``) and tags, and/or/not and parentheses, plain text as name contains, and a bad query
refused with the token and what was expected (page 400 with the message, API 400 JSON)."""

from __future__ import annotations

import pytest

from audit_portal.dashboards import search

from .test_runs_columns import declared, names

pytestmark = pytest.mark.django_db


def found(client, project, q) -> list[str]:
    resp = client.get(f"/p/{project.slug}/runs/", {"q": q, "sort": "name"})
    assert resp.status_code == 200, resp.content.decode()[-2000:]
    return names(resp.content.decode())


@pytest.mark.parametrize(
    "q,expected",
    [
        ("sweep-01", ["sweep-01"]),  # plain text: name contains
        ("SWEEP", ["sweep-00", "sweep-01", "sweep-02"]),
        ("best_bound < 0.025", ["sweep-00", "sweep-01"]),  # best_bound = (i+1)/100
        ("best_bound <= 0.02 and eps_hat > 0.0015", ["sweep-01"]),
        ("acceptance >= 99%", ["sweep-00", "sweep-01"]),  # acceptance = 1 - i/100
        ("params.lr = 1e-5", ["sweep-00"]),
        ("params.lr = 0.00003", ["sweep-01"]),
        ("params.lr < 5e-5", ["sweep-00", "sweep-01"]),
        ("params.optimizer = adam", ["sweep-01", "sweep-02"]),
        ("params.optimizer != adam", ["sweep-00"]),
        ("params.optimizer ~ AD", ["sweep-01", "sweep-02"]),
        ("params.optimizer < 1", []),  # a string is never a number
        ("tags.rl", ["sweep-00", "sweep-01"]),
        ("tag:grpo", ["sweep-00"]),
        ("tags.rl and not tag:grpo", ["sweep-01"]),
        ("tag:grpo or status = failed", ["sweep-00", "sweep-02"]),
        ("(tag:grpo or status = failed) and params.lr > 5e-5", ["sweep-02"]),
        ("status = running", ["sweep-01"]),
        ("duration > 60", ["sweep-01"]),
        ("name ~ '-0' AND NOT name = sweep-02", ["sweep-00", "sweep-01"]),
        ('name = "sweep-02"', ["sweep-02"]),
        ("created >= 2000-01-01 and created < 2999-01-01", ["sweep-00", "sweep-01", "sweep-02"]),
        ("created < '2000-01-01T10:00:00+00:00'", []),
    ],
)
def test_search_finds(client, owner, project, q, expected):
    declared(project)
    client.force_login(owner)
    assert found(client, project, q) == expected


def test_a_dotted_param_is_one_flat_key(client, owner, project):
    # a nested config is stored as dotted keys (runs/declarations.py): params.optim.lr finds the key "optim.lr"
    from audit_portal.runs.models import Run

    runs = declared(project)
    for i, run in enumerate(runs):
        Run.objects.filter(pk=run.pk).update(config={"optim.lr": [1e-6, 2e-6, 3e-6][i], "optim.name": "adamw"})
    client.force_login(owner)
    assert found(client, project, "params.optim.lr > 1.5e-6") == ["sweep-01", "sweep-02"]
    assert found(client, project, "params.optim.name = adamw and params.optim.lr = 1e-6") == ["sweep-00"]
    assert found(client, project, "params.optim = adamw") == []


def test_verdict_search_matches_the_verdict_column(client, owner, project):
    declared(project)
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/", {"sort": "name"}).content.decode()
    import re

    verdicts = re.findall(r'class="badge verdict-([a-z_]+)"', html)
    for code in set(verdicts):
        want = [f"sweep-{i:02d}" for i, v in enumerate(verdicts) if v == code]
        assert found(client, project, f"verdict = {code}") == want
        assert found(client, project, f"verdict != {code}") == [n for n in names(html) if n not in want]


@pytest.mark.parametrize(
    "q,message",
    [
        ("best_bound <", "expected a value after &#x27;&lt;&#x27;, got the end of the query"),
        (
            "best_bound < lots",
            "expected a number after &#x27;best_bound &lt;&#x27;, got &#x27;lots&#x27; at position 14",
        ),
        ("password = x", "expected a field: one of"),
        ("verdict = great", "expected a verdict (certified"),
        ("tag:grpo tag:rl", "expected and, or or the end of the query, got &#x27;tag&#x27; at position 10"),
        ("(tag:grpo", "expected &#x27;)&#x27;, got the end of the query"),
        ("name = 'open", "a quoted value is not closed"),
        ("params.a;b = 1", "params.&lt;key&gt; with keys of letters"),
        ("created > 2026-13-45", "expected a comparison with a date"),
        ("(" * 30 + "tag:x" + ")" * 30, "at most 20 nested"),
        ("not " * 60 + "tag:x", "at most 20 nested"),
    ],
)
def test_bad_query_is_refused_naming_the_token(client, owner, project, q, message):
    declared(project)
    client.force_login(owner)
    resp = client.get(f"/p/{project.slug}/runs/", {"q": q})
    assert resp.status_code == 400 and message in resp.content.decode()
    api = client.get(f"/api/v1/projects/{project.slug}/runs/", {"q": q})
    assert api.status_code == 400 and api.json()["error"]["code"] == "invalid_parameter"
    assert api.json()["error"]["message"].startswith("search: ")


def test_api_list_and_export_take_the_language(client, owner, project):
    declared(project)
    client.force_login(owner)
    data = client.get(f"/api/v1/projects/{project.slug}/runs/", {"q": "tags.rl and params.lr > 2e-5"}).json()
    assert [r["name"] for r in data["results"]] == ["sweep-01"]
    assert data["results"][0]["duration"] == 3725.0 and data["results"][0]["state"] == "running"
    csv_text = b"".join(
        client.get(f"/p/{project.slug}/runs/", {"q": "tag:rl", "format": "csv"}).streaming_content
    ).decode()
    assert csv_text.count("\n") == 3  # header and two runs


def test_created_by_day(client, owner, project):
    from django.utils import timezone

    runs = declared(project)
    client.force_login(owner)
    day = timezone.localtime(runs[1].created_at).date().isoformat()  # the runs are a day apart
    assert found(client, project, f"created = {day}") == ["sweep-01"]
    assert found(client, project, f"created <= {day}") == ["sweep-00", "sweep-01"]
    assert found(client, project, f"created > {day}") == ["sweep-02"]
    assert found(client, project, f"created != {day}") == ["sweep-00", "sweep-02"]


def test_parser_never_evaluates_and_bounds_its_work():
    with pytest.raises(search.SearchError, match="at most 20 conditions"):
        search.parse(" and ".join(["tag:x"] * 21))
    with pytest.raises(search.SearchError, match="at most 500 characters"):
        search.parse("name ~ " + "x" * 600)
    assert search.is_plain("grpo 7b run") and not search.is_plain("tags.rl") and not search.is_plain("a=b")
