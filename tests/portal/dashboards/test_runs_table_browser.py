"""Browsing many runs in the system Chromium: the runs table sorts, filters, searches and pages on the server; three
ticked runs open in the compare page with their names in the legends; the table and a run's sequences export as CSV
and JSON; the sequences page pages with the API's filters and links each call to its drill-down."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from ..browser import BrowserTestCase, browser_marks
from ..conftest import gz, jsonl, records

pytestmark = browser_marks
REAL = ("alpha-ppo", "bravo-grpo", "charlie-dppo")
SYNTHETIC = 30


def synthetic_runs(project, n: int) -> list:
    """``n`` runs, each with a complete certificate whose numbers are spread out (eps_hat = (i+1)/1000, …)."""
    from audit_portal.certificates.models import RunCertificate
    from audit_portal.runs.models import Run, Upload
    from workers.certify.verdict import run_verdict

    now = timezone.now()
    runs = []
    for i in range(n):
        run = Run.objects.create(project=project, name=f"sweep-{i:02d}", created_at=now - timedelta(days=30 - i))
        upload = Upload.objects.create(
            project=project,
            run=run,
            original_name=f"sweep-{i:02d}.jsonl",
            sha256=f"{i + 1:064x}",
            size_bytes=100,
            stage="valid",
        )
        summary = {
            "sequences": 10 * (i + 1),
            "sequences_certified": 10 * (i + 1),
            "eps_hat": (i + 1) / 1000,
            "T_ref": 256,
            "threshold": 0.01,
            "acceptance_rate": 1 - i / 100,
        }
        verdict = run_verdict(summary, {"best": (i + 1) / 100}, {})
        RunCertificate.objects.create(
            project=project,
            run=run,
            upload=upload,
            state="complete",
            summary=summary,
            bounds={"best": (i + 1) / 100},
            verdict=verdict.code,
            verdict_detail=verdict.as_dict(),
            eps_hat=(i + 1) / 1000,
            delta_hat=(i + 1) / 5000,
            acceptance_rate=1 - i / 100,
            best_bound=(i + 1) / 100,
            tokens=1000 * (i + 1),
            sequences=10 * (i + 1),
        )
        runs.append(run)
    return runs


class RunsTableTest(BrowserTestCase):
    broker = "memory"  # the real runs' jobs run synchronously in the test

    def setUp(self):
        super().setUp()
        self.real = {}
        for seed, name in enumerate(REAL, start=1):
            upload, _ = self.processed_upload(
                f"{name}.jsonl.gz",
                gz(jsonl(records(trajectories=8, seed=seed, run_id=name, spike_rate=0.01 * seed))),
                ("validate_upload", "certify_upload", "fidelity_audit"),
            )
            self.real[name] = upload
        synthetic_runs(self.project, SYNTHETIC)

    def numbers(self, column):
        texts = self.page.eval_on_selector_all(
            f'#runs-table tbody td[data-column="{column}"]', "cells => cells.map(c => c.textContent.trim())"
        )
        return [float(t.rstrip("%")) for t in texts if t != "—"]

    def test_sort_filter_search_page_and_export(self):
        from audit_portal.certificates.models import RunCertificate

        page = self.page
        self.sign_in()
        page.click("header nav >> text=Runs")
        page.wait_for_selector("#runs-table")
        total = len(REAL) + SYNTHETIC
        assert page.inner_text("#runs-count") == f"{total} runs"
        assert page.locator("#runs-table tbody tr").count() == 25  # server-side pages of 25
        page.click("#page-next")
        page.wait_for_url("**page=2")
        assert page.locator("#runs-table tbody tr").count() == total - 25
        # sort by ε̂: ascending, then descending on a second click
        page.click('th[data-column="eps_hat"] a')
        page.wait_for_url("**sort=eps_hat*")
        assert page.get_attribute('th[data-column="eps_hat"]', "aria-sort") == "ascending"
        values = self.numbers("eps_hat")
        assert values == sorted(values) and len(values) == 25
        page.click('th[data-column="eps_hat"] a')
        page.wait_for_url("**sort=-eps_hat*")
        values = self.numbers("eps_hat")
        assert values == sorted(values, reverse=True)
        top = max(RunCertificate.objects.filter(project=self.project).values_list("eps_hat", flat=True))
        assert values[0] == pytest.approx(top, rel=1e-3)  # shown to 4 significant digits
        # range filter: acceptance at least 90% and ε̂ at most 0.02
        page.click("#runs-filter summary")
        page.fill("#min_acceptance", "90%")
        page.fill("#max_eps_hat", "0.02")
        page.click("#runs-apply")
        page.wait_for_url("**max_eps_hat=0.02*")
        expected = {
            c.run.name
            for c in RunCertificate.objects.filter(project=self.project).select_related("run")
            if c.eps_hat <= 0.02 and c.acceptance_rate >= 0.9
        }
        shown = set(
            page.eval_on_selector_all(
                '#runs-table tbody td[data-column="name"]', "cells => cells.map(c => c.textContent.trim())"
            )
        )
        assert shown == expected and 0 < len(shown) < total
        # the export carries every row the filters keep, as CSV and as JSON
        with page.expect_download() as info:
            page.click("#export-csv")
        rows = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text())))
        assert {r["name"] for r in rows} == expected and float(rows[0]["eps_hat"]) <= 0.02
        with page.expect_download() as info:
            page.click("#export-json")
        data = json.loads(Path(info.value.path()).read_text())
        assert {r["name"] for r in data} == expected and all(r["acceptance"] >= 0.9 for r in data)
        # search (the other filters cleared)
        page.click("text=Clear")
        page.fill("#runs-q", "bravo")
        page.click("#runs-apply")
        page.wait_for_url("**q=bravo*")
        assert page.eval_on_selector_all(
            '#runs-table tbody td[data-column="name"]', "cells => cells.map(c => c.textContent.trim())"
        ) == ["bravo-grpo"]
        # a bad filter is refused by name, not a server error
        response = page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/?max_eps_hat=lots")
        assert response.status == 400 and "max_eps_hat must be a number" in page.inner_text(".messages")
        self.screenshot("runs-table.png")

    def test_compare_three_runs_ticked_in_the_table(self):
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/?q=o")  # the three real runs (and no sweep)
        for name in REAL:
            page.check(f"#pick-{self.real[name].run_id}")
        page.click("#compare-selected")
        page.wait_for_url("**/compare/?c=*")
        page.wait_for_function("document.body.dataset.figures === 'ready'")
        assert page.locator(".compared .card").count() == 3
        assert page.locator("#headline thead th").count() == 4
        legends = " ".join(page.eval_on_selector_all("#fig-cmp-steps .legendtext", "ts => ts.map(t => t.textContent)"))
        for name in REAL:
            assert name in legends
        for fig in ("fig-cmp-bounds", "fig-cmp-steps", "fig-cmp-step-eps", "fig-cmp-step-logp", "fig-cmp-eps"):
            assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
        for fig in ("fig-cmp-step-eps", "fig-cmp-step-logp"):  # one line per compared run
            legends = page.eval_on_selector_all(f"#{fig} .legendtext", "ts => ts.map(t => t.textContent)")
            assert sorted(legends) == sorted(REAL), (fig, legends)
        self.screenshot("compare-three-runs.png")

    def test_sequences_page_filters_pages_exports_and_links_calls(self):
        from audit_portal.certificates.models import SequenceSummary

        upload = self.real["charlie-dppo"]
        certificate = upload.certificate
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{upload.run_id}/")
        page.click("#all-sequences")
        page.wait_for_selector("#seq-table")
        total = SequenceSummary.objects.filter(certificate=certificate).count()
        assert page.inner_text("#seq-count") == f"{total} sequence{'s' if total != 1 else ''}"
        assert page.locator("#seq-table tbody tr").count() == min(total, 50)
        # the call id links to that call in the fidelity drill-down
        first = page.locator("#seq-table tbody tr").first
        line = first.get_attribute("data-line")
        first.locator("a.call-link").click()
        page.wait_for_url("**/fidelity/calls/*/")
        assert f"line {line}" in page.inner_text("main").lower() or line in page.inner_text("main")
        page.go_back()
        # the API's filters, and the API link returns the same rows
        page.select_option("#seq-accepted", "true")
        page.click("#seq-apply")
        page.wait_for_url("**accepted=true*")
        accepted = SequenceSummary.objects.filter(certificate=certificate, accept=True).count()
        assert page.inner_text("#seq-count").startswith(f"{accepted} ")
        api = page.get_attribute("#api-link", "href")
        assert api == f"/api/v1/certificates/{certificate.pk}/sequences/?accepted=true"
        body = page.evaluate(f"fetch({api!r}).then(r => r.json())")
        assert len(body["results"]) == min(accepted, 100)
        with page.expect_download() as info:
            page.click("#seq-export-csv")
        rows = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text())))
        assert len(rows) == accepted and all(r["accept"] == "True" for r in rows)
        self.screenshot("sequences.png")
