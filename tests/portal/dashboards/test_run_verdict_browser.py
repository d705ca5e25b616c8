"""The run page answers "is it OK?" before any scrolling: the verdict and its sentence sit in the first viewport on a
laptop (1280×800) and on a phone (390×844), in Chromium, with 30 runs, three kernel submissions, a training audit
and an alert rule in the project (what the issue's "Done when" has present)."""

from __future__ import annotations

from ..browser import ARTIFACTS, BrowserTestCase, browser_marks
from ..conftest import gz, jsonl, records
from ..world import kernels_training_and_an_alert
from .test_runs_table_browser import synthetic_runs

pytestmark = browser_marks


class RunVerdictFirstViewportTest(BrowserTestCase):
    broker = "memory"  # the run's jobs run synchronously in the test

    def setUp(self):
        super().setUp()
        self.upload, _ = self.processed_upload(
            "verdict.jsonl.gz",
            gz(jsonl(records(trajectories=8, seed=3, run_id="verdict-run"))),
            ("validate_upload", "certify_upload"),
        )
        synthetic_runs(self.project, 29)
        kernels_training_and_an_alert(self.project)

    def test_the_verdict_and_its_sentence_are_in_the_first_viewport(self):
        url = f"{self.live_server_url}/p/{self.project.slug}/runs/{self.upload.run_id}/"
        for width, height in ((1280, 800), (390, 844)):
            context = self.browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            self.page, keep = page, self.page
            try:
                self.sign_in()
                page.goto(url)
                for selector in ("#run-verdict-label", "#run-verdict-sentence"):
                    box = page.locator(selector).bounding_box()
                    assert box is not None and box["y"] >= 0, selector
                    assert box["y"] + box["height"] <= height, (width, height, selector, box)
                label = page.inner_text("#run-verdict-label")
                self.upload.refresh_from_db()
                assert label == self.upload.certificate.verdict_detail["label"]
                page.screenshot(path=str(ARTIFACTS / f"run-verdict-{width}x{height}.png"))
            finally:
                self.page = keep
                context.close()
