"""The newcomer's task from the run-verdict issue, in the system Chromium, with 30 runs, three kernel submissions, a
training audit and an alert rule present: find the lowest-B* run of one model through the runs table's search and
sort, compare it with another run ticked in the table, and export both with an API key issued on the keys page — the
export (no browser session) carries the numbers the compare page shows, and the table, the export and the API list
(with the key) carry the same verdict."""

from __future__ import annotations

import csv
import io

import pytest

from ..browser import BrowserTestCase, browser_marks
from ..world import kernels_training_and_an_alert
from .test_runs_table_browser import synthetic_runs

pytestmark = browser_marks
MODEL = "qwen-7b"


class NewcomerTaskTest(BrowserTestCase):
    broker = "memory"  # nothing is queued: the runs are stored complete

    def setUp(self):
        super().setUp()
        from audit_portal.runs.models import Run

        runs = synthetic_runs(self.project, 30)  # B* = (i+1)/100, the newest last
        # every third run is the model asked about, so the lowest B* overall (sweep-00) is another model's and the
        # newest first (the table's default order) puts sweep-28 on top: only the search and the sort find sweep-01
        for i, run in enumerate(runs):
            model = MODEL if i % 3 == 1 else ("llama-8b" if i % 3 == 0 else "mistral-7b")
            Run.objects.filter(pk=run.pk).update(config={"model": model, "lr": (i + 1) / 10000})
        kernels_training_and_an_alert(self.project)

    def cell(self, row: str, column: str) -> str:
        return self.page.inner_text(f'#runs-table tbody tr:nth-child({row}) td[data-column="{column}"]').strip()

    def test_lowest_bound_of_a_model_compared_and_exported_with_an_api_key(self):
        from audit_portal.certificates.models import RunCertificate

        ours = RunCertificate.objects.filter(project=self.project, run__config__model=MODEL).select_related("run")
        lowest = min(ours, key=lambda c: c.best_bound)
        page = self.page
        self.sign_in()
        # an API key, issued once on the keys page
        page.click("header nav >> text=API keys")
        page.fill("#key-name", "export")
        page.click("button:has-text('Create key')")
        token = page.inner_text("#new-token").strip()
        assert token.startswith("ap_")
        # the runs of one model, lowest B* first
        page.click("header nav >> text=Runs")
        page.fill("#runs-q", f"params.model = {MODEL}")
        page.click("#runs-apply")
        page.wait_for_url("**q=*")
        assert page.inner_text("#runs-count") == f"{ours.count()} runs"
        page.click('th[data-column="best_bound"] a')
        page.wait_for_url("**sort=best_bound*")
        assert page.get_attribute('th[data-column="best_bound"]', "aria-sort") == "ascending"
        assert self.cell("1", "name") == lowest.run.name == "sweep-01"
        assert float(self.cell("1", "best_bound")) == pytest.approx(lowest.best_bound, rel=1e-3)
        assert self.cell("1", "verdict") == lowest.verdict_detail["label"]  # the run page's verdict, in the table
        # compare it with another run ticked in the same table (the third row)
        other = self.cell("3", "name")
        page.check('#runs-table tbody tr:nth-child(1) input[name="c"]')
        page.check('#runs-table tbody tr:nth-child(3) input[name="c"]')
        page.click("#compare-selected")
        page.wait_for_url("**/compare/?c=*")
        assert [page.inner_text("#run-1"), page.inner_text("#run-2")] == [lowest.run.name, other]
        shown = [
            float(t.split()[0])
            for t in page.eval_on_selector_all(
                '#headline tr[data-row="best_bound"] td', "cells => cells.map(c => c.textContent.trim())"
            )
        ]
        # export both with the key: the link the compare page gives, requested without the browser's session
        href = page.get_attribute("#compare-export-link", "href")
        anonymous = self._pw.request.new_context(base_url=self.live_server_url)
        keyed = self._pw.request.new_context(
            base_url=self.live_server_url, extra_http_headers={"Authorization": f"Bearer {token}"}
        )
        try:
            assert anonymous.get(href).status in (401, 403)  # the key, not a session, is what lets the export in
            response = keyed.get(href)
            assert response.status == 200 and response.headers["content-type"].startswith("text/csv")
            rows = {r["name"]: r for r in csv.DictReader(io.StringIO(response.text()))}
            listed = keyed.get(f"/api/v1/projects/{self.project.slug}/runs/", params={"q": f"name = {lowest.run.name}"})
            [api_row] = listed.json()["results"]
        finally:
            anonymous.dispose()
            keyed.dispose()
        assert sorted(rows) == sorted([lowest.run.name, other])
        assert api_row["verdict_detail"] == lowest.verdict_detail  # the API list: the same verdict and sentence
        for name, on_page in zip((lowest.run.name, other), shown):
            certificate = RunCertificate.objects.get(project=self.project, run__name=name)
            assert float(rows[name]["best_bound"]) == pytest.approx(certificate.best_bound)
            assert float(rows[name]["best_bound"]) == pytest.approx(on_page, rel=1e-3)  # the page shows 4 digits
            assert rows[name]["verdict"] == certificate.verdict
        self.screenshot("newcomer-compare.png")
