"""A person in the system Chromium: submits a training-step audit from the project's form, watches its job on the
``gpu`` queue go from queued to succeeded live (a worker thread starts mid-test), and reads the figures the page
then draws: exact TV distribution and by position, the top-K interval against the exact TV, B* per view, the
undetermined shares and the masked fraction per loss, next to the configuration with the device used."""

from __future__ import annotations

import torch
from celery.contrib.testing.worker import start_worker

from audit_portal.celery import app
from audit_portal.training.models import TrainingAudit

from ..browser import BrowserTestCase, browser_marks

pytestmark = browser_marks

FIELDS = {
    "vocab": "16",
    "d_model": "16",
    "n_layers": "1",
    "n_heads": "2",
    "max_len": "16",
    "batch": "4",
    "group": "2",
    "prompt_len": "3",
    "length": "6",
    "topk": "4",
}
FIGURES = ("fig-tv-distribution", "fig-tv-position", "fig-interval", "fig-bounds", "fig-undetermined", "fig-masked")


class TrainingBrowserTest(BrowserTestCase):
    broker = "filesystem"  # the live server sends the task; a worker thread started mid-test receives it
    project_name = "Training Lab"
    viewport = {"width": 1400, "height": 900}

    def test_submit_watch_live_and_read_the_figures(self):
        import pipelines  # noqa: F401 - registers tasks with the app, as the worker command does

        page = self.page
        self.sign_in()
        page.click("#training-link a")
        page.wait_for_selector("#training-form")
        for name, value in FIELDS.items():
            page.fill(f"#{name}", value)
        page.fill("#numerics", "bf16_weights,sdpa")
        page.evaluate(
            "document.querySelectorAll('input[name=losses]').forEach("
            "(c) => { c.checked = ['ppo', 'dppo_binary_tv', 'cdppo'].includes(c.value); })"
        )
        self.screenshot("training-form.png")
        page.click("#training-submit")
        page.wait_for_selector("#job-card")
        assert page.inner_text("#job-state") == "queued"  # no worker yet
        assert "not started" in page.inner_text("#device-used")
        page.wait_for_function("document.getElementById('live-dot').classList.contains('on')")
        with start_worker(app, pool="solo", perform_ping_check=False, queues=["gpu"], shutdown_timeout=10):
            # the page follows the job live and reloads itself with the results once it succeeds
            page.wait_for_function("document.body.dataset.figures === 'ready'", timeout=90000)
        audit = TrainingAudit.objects.get(project=self.project)
        assert audit.rollout_numerics == "bf16_weights,sdpa" and audit.is_complete
        for fig in FIGURES:
            assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
        used = "cuda" if torch.cuda.is_available() else "cpu"
        assert page.inner_text("#device-used").startswith(used)
        assert page.locator("#steps-table tbody tr").count() == 3
        assert page.locator("#certificate-table tbody tr").count() == 2  # K=1 and K=4
        bars = page.evaluate("document.getElementById('fig-masked').data[0].y")
        assert bars == [audit.steps[n]["masked_fraction"] for n in ("ppo", "dppo_binary_tv", "cdppo")]
        self.screenshot("training-audit.png")
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/training/")
        assert "complete" in page.inner_text(f"tr[data-audit-id='{audit.pk}']")

    def test_a_bad_field_is_named_on_the_form(self):
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/training/")
        page.fill("#batch", "-8")
        page.click("#training-submit")
        page.wait_for_selector("#submit-error")
        assert "batch: must be at least 1" in page.inner_text("#submit-error")
        assert page.get_attribute("#batch", "aria-invalid") == "true" and page.input_value("#batch") == "-8"
        assert not TrainingAudit.objects.exists()
