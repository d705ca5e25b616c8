"""A person in the system Chromium opens a run's fidelity audit from the run page (the worked examples A, C, D of
docs/fcr.md as the upload), sees the FAIL verdict and the one closed-failure violation, the figures drawn, then drills into the
violating call: tokens decoded with the registered toy tokenizer (docs/fcr.md#toy-tokenizer), the sentinel position
coloured and explained."""

from __future__ import annotations

import threading

from audit_portal import task_names

from ..browser import BrowserTestCase, browser_marks
from ..conftest import jsonl
from ..pipelines.test_fidelity_job import TOY_VOCAB_TEXT, examples

pytestmark = browser_marks


class FidelityPageTest(BrowserTestCase):
    broker = "memory"  # jobs run synchronously in the test; no message may reach a real broker
    username = "fiona"
    password = "fiona-password-1"
    project_name = "Fidelity Lab"

    def audited_upload(self):
        from audit_portal.fidelity.services import register_tokenizer

        register_tokenizer(
            project=self.project, data=TOY_VOCAB_TEXT.encode(), name="toy vocabulary", uploaded_by="fiona"
        )
        upload, outcomes = self.processed_upload(
            "examples.jsonl", jsonl(examples()), ("validate_upload", "fidelity_audit")
        )
        assert outcomes["fidelity_audit"] == "succeeded"
        return upload

    def test_fidelity_page_and_call_drill_down(self):
        upload = self.audited_upload()
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{upload.run_id}/")
        page.click("#fidelity-link")
        page.wait_for_url("**/fidelity/")  # not the run page's own figures, which may be ready already
        page.wait_for_function("document.body.dataset.figures === 'ready'")
        assert page.inner_text("#verdict-value") == "FAIL"
        assert page.inner_text("#cf-count") == "1"
        for fig in (
            "fig-coverage",
            "fig-reasons-any",
            "fig-steps",
            "fig-trajectories",
            "fig-alignment",
            "fig-ledger",
            "fig-provenance",
            "fig-certificates",
        ):
            assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
        assert "SENTINEL_LOGPROB" in page.inner_text("#fig-coverage")  # a stacked segment per exclusion reason
        assert "toy vocabulary" in page.inner_text("#tokenizer-card")
        assert "background:title" in page.inner_text("#ledger-table")
        self.screenshot("fidelity-run.png")

        page.click("#calls-table >> text=tD-0")
        page.wait_for_selector("#tokens")
        assert page.inner_text("#call-verdict") == "partial"
        assert "toy vocabulary" in page.inner_text("#tokenizer-note")
        tokens = page.locator("#tokens .tok")
        assert tokens.count() == 4
        assert [tokens.nth(i).inner_text() for i in range(4)] == ["ls", " -l", "↵\n", "<|end|>"]
        sentinel = tokens.nth(2)
        assert "bad" in sentinel.get_attribute("class") and "violation" in sentinel.get_attribute("class")
        assert "SENTINEL_LOGPROB" in sentinel.get_attribute("title")
        assert "bad" not in tokens.nth(0).get_attribute("class")
        sentinel.hover()
        page.wait_for_function("document.getElementById('token-detail').dataset.pos === '2'")
        detail = page.inner_text("#token-detail")
        assert "SENTINEL_LOGPROB" in detail and "-9999" in detail and "used in the loss" in detail
        assert "SENTINEL_LOGPROB" in page.inner_text("#token-legend")
        self.screenshot("fidelity-call.png")

    def test_a_running_audit_updates_the_page_live(self):
        """While a re-audit runs the page follows its job (websocket, polling fallback) and shows the stored report
        by itself once the job succeeds — no manual reload."""
        from audit_portal.jobs import services as jobs

        upload = self.audited_upload()
        job = jobs.create_job(
            project=self.project,
            kind="fidelity_audit",
            task_name=task_names.FIDELITY_AUDIT,
            subject_kind="upload",
            subject_id=upload.pk,
            enqueue=False,
        )
        job = jobs.start_job(job.pk)
        jobs.report_progress(job, 0.1, "auditing: 10% of the file read (line 1)")
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{upload.run_id}/fidelity/")
        card = "[data-live-job]"
        assert page.inner_text(f"{card} [data-field=pct]") == "10%"

        def from_a_worker(fn, *args):  # as a worker thread would (the test's own thread runs the browser's loop)
            from django.db import connection

            def run():
                try:
                    fn(*args)
                finally:
                    connection.close()

            t = threading.Thread(target=run)
            t.start()
            t.join()

        page.wait_for_function("document.querySelector('[data-live-job] [data-field=dot]').classList.contains('on')")
        from_a_worker(jobs.report_progress, job, 0.6, "auditing: 66% of the file read (line 2)")
        page.wait_for_function(
            "document.querySelector('[data-live-job] [data-field=message]').textContent.includes('66%')", timeout=20000
        )
        assert page.inner_text(f"{card} [data-field=pct]") == "60%"
        self.screenshot("fidelity-live-job.png")
        from_a_worker(jobs.finish_job, job, {})
        page.wait_for_function("!document.querySelector('[data-live-job]')", timeout=20000)  # reloaded by itself
        page.wait_for_selector("#verdict-value")
        assert page.inner_text("#verdict-value") == "FAIL"
