"""One verdict per run, the same everywhere: stored with the certificate, in the API's run list and detail (with the
metrics and the runs table's filters), in the API-key export, the runs table and at the top of the run page."""

from __future__ import annotations

import csv
import io

import pytest

from workers.certify.verdict import LABELS, run_verdict

from ..conftest import records
from ..certificates.test_certificates import certified
from .test_runs_table_browser import synthetic_runs

pytestmark = pytest.mark.django_db


def test_a_certificate_stores_the_verdict_of_its_own_numbers(api, project):
    certificate, _ = certified(api, project, records(trajectories=6))
    expected = run_verdict(certificate.summary, certificate.bounds, certificate.options)
    assert certificate.verdict == expected.code and certificate.verdict_detail == expected.as_dict()
    assert certificate.verdict in LABELS


def test_the_api_run_list_and_detail_carry_verdict_and_metrics(api, project):
    certificate, _ = certified(api, project, records(trajectories=6))
    rows = api.get(f"/api/v1/projects/{project.slug}/runs/").json()["results"]
    [row] = [r for r in rows if r["id"] == certificate.run_id]
    assert row["verdict"] == certificate.verdict and row["certificate_id"] == certificate.pk
    assert row["verdict_detail"]["sentence"] == certificate.verdict_detail["sentence"]
    assert row["best_bound"] == certificate.best_bound and row["eps_hat"] == certificate.eps_hat
    detail = api.get(f"/api/v1/runs/{certificate.run_id}/").json()
    assert detail["verdict"] == certificate.verdict and detail["tokens"] == certificate.tokens


def test_the_api_list_filters_and_sorts_like_the_table(api, project):
    synthetic_runs(project, 12)  # B* = (i+1)/100: the first nine within the default budget 0.1, then 0.10, 0.11, 0.12
    url = f"/api/v1/projects/{project.slug}/runs/"
    got = api.get(url, {"verdict": "certified", "sort": "best_bound"}).json()
    assert [r["name"] for r in got["results"]] == [f"sweep-{i:02d}" for i in range(10)]
    got = api.get(url, {"verdict": "over_budget"}).json()
    assert sorted(r["name"] for r in got["results"]) == ["sweep-10", "sweep-11"]
    got = api.get(url, {"min_eps_hat": "0.004", "max_eps_hat": "0.006", "sort": "-eps_hat"}).json()
    assert [r["name"] for r in got["results"]] == ["sweep-05", "sweep-04", "sweep-03"]
    bad = api.get(url, {"verdict": "fine"})
    assert bad.status_code == 400 and "verdict must be one of" in bad.json()["error"]["message"]


def test_export_works_with_an_api_key(api, project):
    synthetic_runs(project, 3)
    resp = api.get(f"/api/v1/projects/{project.slug}/runs.csv", {"sort": "name"})
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(resp.streaming_content).decode())))
    assert [r["name"] for r in rows] == ["sweep-00", "sweep-01", "sweep-02"]
    assert all(r["verdict"] == "certified" and "within the budget" in r["verdict_sentence"] for r in rows)
    as_json = api.get(f"/api/v1/projects/{project.slug}/runs.json")
    assert as_json.status_code == 200
    assert api.get(f"/api/v1/projects/{project.slug}/runs.xml").status_code == 404


def test_the_run_page_opens_with_the_verdict_and_the_table_shows_it(client, owner, project):
    runs = synthetic_runs(project, 12)
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/{runs[11].pk}/").content.decode()
    banner = html.index('id="run-verdict"')
    assert banner < html.index('id="run-figures"')  # above every number and figure
    assert LABELS["over_budget"] in html and "above the budget" in html
    table = client.get(f"/p/{project.slug}/runs/", {"verdict": "over_budget"}).content.decode()
    assert table.count('class="badge verdict-over_budget"') == 2 and "verdict-certified" not in table


def test_a_streamed_run_reads_as_its_live_view_not_its_last_segment(api, client, owner, project, tmp_path):
    """A trainer client streams a run in segments: the run's verdict is the merged view's, everywhere; a segment's own
    certificate (one step) must never speak for the run."""
    from audit_portal.certificates.models import RunCertificate
    from audit_portal.live.models import LiveRun

    from ..live_steps import write_steps
    from ..live.test_live_runs import post, process

    for step in (0, 1):
        upload = post(api, project, write_steps(tmp_path / f"s{step}.parquet", "streamed", [step]), steps=str(step))
        process(upload.json()["id"])
    live = LiveRun.objects.get(run__name="streamed")
    assert live.verdict in LABELS and live.steps == [0, 1]
    expected = run_verdict(live.certificate["summary"], live.certificate["bounds"], live.certificate["options"])
    assert live.verdict == expected.code
    last = RunCertificate.objects.filter(run=live.run).latest("created_at")
    other = "certified" if live.verdict != "certified" else "over_budget"
    RunCertificate.objects.filter(pk=last.pk).update(
        verdict=other, verdict_detail={"code": other, "label": LABELS[other], "sentence": "one segment"}
    )
    row = api.get(f"/api/v1/runs/{live.run_id}/").json()
    assert row["verdict"] == live.verdict  # the merged view's, not the last segment's
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/{live.run_id}/").content.decode()
    banner = html[html.index('id="run-verdict"') : html.index("</section>", html.index('id="run-verdict"'))]
    assert LABELS[live.verdict] in banner and "one segment" not in banner and "live view" in banner


def test_a_run_not_certified_says_where_its_divergence_comes_from(api, client, owner, project):
    certificate, _ = certified(api, project, records(trajectories=8, spike_rate=0.05))
    assert certificate.verdict != "certified"
    worst = certificate.steps.exclude(eps_hat_max=None).order_by("-eps_hat_max", "step").first()
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/{certificate.run_id}/").content.decode()
    panel = html[html.index('id="divergence-sources"') : html.index("</div>", html.index('id="divergence-sources"'))]
    assert f'data-step="{worst.step}"' in panel and f"step={worst.step}" in panel  # linked to that step's sequences
    top = certificate.sequence_summaries.exclude(eps_hat=None).order_by("-eps_hat", "line").first()
    assert f'data-line="{top.line}"' in panel and "Sequences by status" in panel
    # what to do next, beside the verdict: the divergence the budget needs next to the run's own, and masking's effect
    from django.utils.html import escape

    verdict = certificate.verdict_detail
    banner = html[html.index('id="run-verdict"') : html.index("</section>", html.index('id="run-verdict"'))]
    assert escape(verdict["sentence"]) in banner and "per-token TV the budget needs" in banner
    assert f"at most {verdict['needed_eps']:.3g} over" in verdict["sentence"]
    assert f"this run's certified ε̂ is {certificate.eps_hat:.3g}" in verdict["sentence"]


def test_the_banner_says_what_masking_would_buy_where_it_lowers_the_bound(client, owner, project):
    """A run whose mask at its threshold keeps 75% of sequences with a bound far below its own B* (the engine's
    case in tests/certify/test_verdict.py), stored as the pipeline stores it: the run page says so at the top."""
    from django.utils.html import escape

    from audit_portal.certificates.models import RunCertificate

    [run] = synthetic_runs(project, 1)
    certificate = RunCertificate.objects.get(run=run)
    summary = {**certificate.summary, "threshold": 1e-4, "acceptance_rate": 0.75}
    verdict = run_verdict(summary, {"best": 2.0}, {})
    RunCertificate.objects.filter(pk=certificate.pk).update(
        summary=summary, bounds={"best": 2.0}, best_bound=2.0, verdict=verdict.code, verdict_detail=verdict.as_dict()
    )
    assert verdict.kept_bound < 2.0 and "keeps 75% of sequences" in verdict.sentence
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()
    banner = html[html.index('id="run-verdict"') : html.index("</section>", html.index('id="run-verdict"'))]
    assert escape(verdict.sentence) in banner and "Masking at the threshold" in banner


def test_a_segments_certificate_says_it_covers_only_its_steps(api, project, tmp_path):
    from audit_portal.runs.models import Upload

    from ..live_steps import write_steps
    from ..live.test_live_runs import post, process

    upload_id = post(api, project, write_steps(tmp_path / "s0.parquet", "seg-run", [0]), steps="0").json()["id"]
    process(upload_id)
    run_id = Upload.objects.get(pk=upload_id).run_id
    body = api.get(f"/api/v1/runs/{run_id}/certificate/").json()
    assert body["covers"] == "segment" and body["live_view"] == f"/api/v1/runs/{run_id}/live/"
    plain, _ = certified(api, project, records(trajectories=4))
    whole = api.get(f"/api/v1/certificates/{plain.pk}/").json()
    assert whole["covers"] == "upload" and whole["live_view"] is None
    assert whole["verdict"]["code"] == plain.verdict
