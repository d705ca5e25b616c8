"""A person in the system Chromium: signs in, uploads a run log by the drop zone's file picker, opens the
validation job while it is still queued, and watches it finish live (no reload) once a worker starts."""

from __future__ import annotations

from celery.contrib.testing.worker import start_worker

from audit_portal.celery import app

from ..browser import BrowserTestCase, browser_marks
from ..conftest import gz, jsonl, records

pytestmark = browser_marks


class BrowserUploadTest(BrowserTestCase):
    broker = "filesystem"  # the live server sends tasks; a worker thread started mid-test receives them

    def test_upload_and_watch_the_job_finish_live(self):
        import pipelines  # noqa: F401 - registers tasks with the app, as the worker command does

        page = self.page
        self.sign_in()
        page.click("text=Uploads")
        run_file = self.tmp / "run.jsonl.gz"
        run_file.write_bytes(gz(jsonl(records(trajectories=12))))
        page.set_input_files("#file-input", str(run_file))
        page.wait_for_selector("#upload-ok")
        assert "received" in page.inner_text("#upload-ok")
        page.click('#upload-jobs li[data-kind="validate_upload"] a')
        page.wait_for_selector("#job-state")
        assert page.inner_text("#job-state") == "queued"  # no worker yet
        page.wait_for_function("document.getElementById('live-dot').classList.contains('on')")
        with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=10):
            page.wait_for_function("document.getElementById('job-state').dataset.state === 'succeeded'", timeout=60000)
        assert page.inner_text("#job-state").startswith("finished: valid")  # the outcome in words, not "succeeded"
        assert page.inner_text("#job-pct") == "100%"
        assert page.inner_text("#subject-stage") == "valid"  # updated live from the job's result
        self.screenshot("job-finished-live.png")
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/uploads/")
        assert "valid" in page.inner_text("table")
        self.screenshot("uploads.png")

    def test_a_bad_upload_shows_the_line_and_reason(self):
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/uploads/")
        bad = self.tmp / "broken.jsonl"
        bad.write_bytes(jsonl(records(trajectories=2)) + b'{"schema": "fcr/1", "run_id": \n')
        page.set_input_files("#file-input", str(bad))
        page.wait_for_selector("#upload-error")
        text = page.inner_text("#upload-error")
        assert "invalid_run_log" in text and "line" in text
        self.screenshot("upload-error.png")

    def test_run_page_draws_the_certificate(self):
        upload, _ = self.processed_upload(
            "cert.jsonl.gz", gz(jsonl(records(trajectories=16))), ("validate_upload", "certify_upload")
        )
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{upload.run_id}/")
        page.wait_for_function("document.body.dataset.figures === 'ready'")
        for fig in ("fig-bounds", "fig-steps", "fig-dist", "fig-status", "fig-length"):
            assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
        assert "visited contexts only" in page.inner_text("#visited-caveat")
        rows_before = page.inner_text("#bound-table")
        page.fill("#budget", "0.5")
        page.click("#budget-apply")
        page.wait_for_function(f"document.querySelector('#bound-table').innerText !== {rows_before!r}")
        self.screenshot("run-certificate.png")

    def test_compare_two_certificates_from_the_run_page(self):
        a, _ = self.processed_upload(
            "a.jsonl.gz", gz(jsonl(records(trajectories=8, seed=1))), ("validate_upload", "certify_upload")
        )
        b, _ = self.processed_upload(
            "b.jsonl.gz",
            gz(jsonl(records(trajectories=8, seed=2, spike_rate=0.05))),
            ("validate_upload", "certify_upload"),
        )
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{a.run_id}/?certificate={a.certificate.pk}")
        page.click("#compare-link")
        page.select_option("#cmp-b", str(b.certificate.pk))  # A is preselected from the run page
        page.click("#compare-form button")
        page.wait_for_function("document.body.dataset.figures === 'ready'")
        for fig in ("fig-cmp-bounds", "fig-cmp-steps", "fig-cmp-eps"):
            assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
        assert page.locator("#headline tbody tr").count() == 7
        assert "visited" in page.inner_text("#compare-caveat")
        assert page.get_attribute("#run-2", "href").endswith(f"?certificate={b.certificate.pk}")
        self.screenshot("compare-certificates.png")
