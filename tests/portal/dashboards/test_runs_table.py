"""The runs table and the sequences page on the server: ranges, sort with missing values last, bad parameters refused
by name (page: 400 with the message; export: a JSON error), exports that stream every filtered row, and a page's
query count that does not grow with the number of runs."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ..conftest import records
from ..certificates.test_certificates import certified
from .test_runs_table_browser import synthetic_runs

pytestmark = pytest.mark.django_db


def names(html: str) -> list[str]:
    import re

    return re.findall(r'<td class="" data-column="name"><a href="[^"]+">([^<]+)</a>', html)


def test_ranges_sort_and_missing_values_last(client, owner, project):
    synthetic_runs(project, 12)
    from audit_portal.runs.models import Run

    Run.objects.create(project=project, name="no-certificate-yet")
    client.force_login(owner)
    url = f"/p/{project.slug}/runs/"
    html = client.get(url, {"sort": "eps_hat"}).content.decode()
    got = names(html)
    assert got[:3] == ["sweep-00", "sweep-01", "sweep-02"] and got[-1] == "no-certificate-yet"
    got = names(client.get(url, {"sort": "-eps_hat"}).content.decode())
    assert got[0] == "sweep-11" and got[-1] == "no-certificate-yet"  # missing last both ways
    got = names(client.get(url, {"min_eps_hat": "0.004", "max_eps_hat": "0.006", "sort": "name"}).content.decode())
    assert got == ["sweep-03", "sweep-04", "sweep-05"]
    got = names(client.get(url, {"min_acceptance": "95%", "sort": "name"}).content.decode())
    assert got == [f"sweep-{i:02d}" for i in range(6)]  # acceptance 1 − i/100 ≥ 0.95


@pytest.mark.parametrize(
    "params,message",
    [
        ({"max_eps_hat": "lots"}, "max_eps_hat must be a number, got &#x27;lots&#x27;"),
        ({"min_tokens": "nan"}, "min_tokens must be a finite number"),
        ({"sort": "password"}, "sort must be one of name, verdict, eps_hat"),
    ],
)
def test_bad_parameters_are_refused_by_name(client, owner, project, params, message):
    client.force_login(owner)
    resp = client.get(f"/p/{project.slug}/runs/", params)
    assert resp.status_code == 400 and message in resp.content.decode()
    export = client.get(f"/p/{project.slug}/runs/", {**params, "format": "csv"})
    assert export.status_code == 400 and export.json()["error"]["code"] == "invalid_parameter"
    assert client.get(f"/p/{project.slug}/runs/", {"format": "xml"}).status_code == 400


def test_export_streams_every_filtered_row(client, owner, project):
    synthetic_runs(project, 40)
    client.force_login(owner)
    resp = client.get(f"/p/{project.slug}/runs/", {"max_eps_hat": "0.030", "format": "csv"})
    assert resp.status_code == 200 and resp.streaming and resp["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(resp.streaming_content).decode())))
    assert len(rows) == 30 and {float(r["eps_hat"]) for r in rows} == {(i + 1) / 1000 for i in range(30)}
    data = json.loads(b"".join(client.get(f"/p/{project.slug}/runs/", {"format": "json"}).streaming_content))
    assert len(data) == 40 and set(data[0]) >= {
        "name",
        "eps_hat",
        "delta_hat",
        "acceptance",
        "best_bound",
        "coverage",
        "tokens",
        "steps",
        "created",
        "certificate_id",
    }


def test_query_count_does_not_grow_with_runs(client, owner, project):
    client.force_login(owner)
    synthetic_runs(project, 3)
    with CaptureQueriesContext(connection) as few:
        assert client.get(f"/p/{project.slug}/runs/").status_code == 200
    from audit_portal.runs.models import Run, Upload

    Upload.objects.filter(project=project).delete()
    Run.objects.filter(project=project).delete()
    synthetic_runs(project, 25)
    with CaptureQueriesContext(connection) as many:
        assert client.get(f"/p/{project.slug}/runs/").status_code == 200
    assert len(many) == len(few)


def test_sequences_page_uses_the_apis_filters(api, client, owner, project):
    certificate, _ = certified(api, project, records(trajectories=10, spike_rate=0.05))
    client.force_login(owner)
    url = f"/p/{project.slug}/runs/{certificate.run_id}/sequences/"
    html = client.get(url, {"accepted": "false"}).content.decode()
    refused = certificate.sequence_summaries.filter(accept=False).count()
    assert f"{refused} sequence" in html
    assert f'href="/api/v1/certificates/{certificate.pk}/sequences/?accepted=false" id="api-link"' in html
    api_rows = api.get(f"/api/v1/certificates/{certificate.pk}/sequences/", {"accepted": "false"}).json()["results"]
    assert len(api_rows) == refused
    resp = client.get(url, {"status": "BOGUS"})
    assert resp.status_code == 400 and "status must be one of CERT_IN" in resp.content.decode()
    assert (
        client.get(url, {"step": "x", "format": "json"}).json()["error"]["message"]
        == "step must be an integer, got 'x'"
    )
    rows = json.loads(b"".join(client.get(url, {"status": "CERT_IN", "format": "json"}).streaming_content))
    assert len(rows) == certificate.sequence_summaries.filter(status="CERT_IN").count()
    assert all(r["status"] == "CERT_IN" for r in rows)


def test_a_streamed_run_shows_its_live_view_not_its_last_segment(client, owner, project):
    """A trainer client's run is its segments merged into a live view: the table shows that view's numbers."""
    from audit_portal.live.models import LiveRun
    from audit_portal.runs.models import Run

    run = Run.objects.create(project=project, name="streamed", tags=["grpo", "<b>7b</b>"])
    LiveRun.objects.create(
        run=run,
        steps=[0, 1, 2],
        certificate={
            "summary": {"eps_hat": 0.25, "delta_hat": 0.5, "acceptance_rate": 0.75, "tokens": 123},
            "bounds": {"best": 7.5},
        },
    )
    client.force_login(owner)
    rows = list(
        __import__("audit_portal.dashboards.tables", fromlist=["runs_table"]).runs_table(Run.objects.filter(pk=run.pk))
    )
    (r,) = rows
    assert (r.eps_hat, r.delta_hat, r.acceptance, r.best_bound, r.tokens, r.steps) == (0.25, 0.5, 0.75, 7.5, 123, 3)
    page = client.get(f"/p/{project.slug}/runs/?min_best_bound=7&max_best_bound=8")
    assert page.status_code == 200 and "streamed" in page.content.decode()
    html = page.content.decode()
    assert 'data-tag="grpo"' in html and "&lt;b&gt;7b&lt;/b&gt;" in html and "<b>7b</b>" not in html  # tags, escaped
    assert "streamed" not in client.get(f"/p/{project.slug}/runs/?max_best_bound=7").content.decode()
