"""The run page in the system Chromium draws the per-step mismatch metrics next to the certificate (a Parquet
upload, processed by the real tasks): the run-level table and both figures, one point per step."""

from __future__ import annotations

from workers.fcr.parquet_write import Writer

from ..browser import BrowserTestCase, browser_marks
from ..conftest import records

pytestmark = browser_marks


class StepMetricsBrowserTest(BrowserTestCase):
    def test_run_page_draws_the_step_metrics(self):
        path = self.tmp / "run.parquet"
        with Writer(path) as w:
            for r in records(trajectories=16, steps=5):
                w.add(r)
        upload, _ = self.processed_upload("run.parquet", path.read_bytes(), ("validate_upload", "certify_upload"))
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{upload.run_id}/")
        page.wait_for_function("document.body.dataset.figures === 'ready'")
        for fig in ("fig-step-mismatch", "fig-step-weights"):
            assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
        n_points = page.evaluate("document.getElementById('fig-step-mismatch').data[0].x.length")
        assert n_points == 5
        cells = page.locator("#run-metrics td").all_inner_texts()
        assert len(cells) == 11 and all(c.strip() for c in cells)
        self.screenshot("run-step-metrics.png")
