"""A person in the system Chromium: reads the conformance matrix (coloured cells, KC-C, interop score), opens
a contract, submits a kernel from the form and watches the submission's rows fill in live as verdicts land
(no reload). Verdicts are written from the test, standing in for the worker, so no engine run is needed here
(test_kernels_submission_e2e runs the engine through a real worker)."""
from __future__ import annotations

import copy
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from channels.testing import ChannelsLiveServerTestCase
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.test import override_settings

from audit_portal.accounts.services import create_project
from audit_portal.celery import app
from audit_portal.jobs import services as jobs
from audit_portal.kernels import services
from audit_portal.kernels.models import Contract, Submission
from workers.contracts.grading import grade
from workers.contracts.loader import SPECS_DIR

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="system Chromium not installed (apt-get install chromium)")]

PARSED = services.parse_contract_files(SPECS_DIR.glob("*.yaml"))


def record(submission, cls, code, margin=0.2):
    entry = next(e for e in submission.plan if e["class"] == cls)
    infinite = code == "FAIL"
    detail = {"verdict": code, "contract_id": entry["contract_id"], "contract_class": cls, "statistic": 0.2,
              "bound": 1.0, "margin": None if infinite else margin, "assurance_level": 3, "reason": f"{code} (test)"}
    services.record_verdict(submission, Contract.objects.get(pk=entry["contract"]), detail, margin_infinite=infinite)


def in_worker_thread(fn):
    result = []

    def run():
        try:
            result.append(fn())
        finally:
            connections.close_all()  # this thread's connection, so the test database can be dropped

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert result, "the worker stand-in did not finish"
    return result[0]


def finished_submission(project, impl, verdicts, device="cpu"):
    submission = services.submit_conformance(project=project, submitted_by="alice", device=device,
                                             contracts=list(verdicts), import_path=impl)
    jobs.start_job(submission.job_id)
    for cls, code in verdicts.items():
        record(submission, cls, code)
    services.finish_submission(submission, grade([v.detail for v in submission.verdicts.all()]))
    jobs.finish_job(submission.job, {"submission": submission.pk})
    return submission


class KernelsBrowserTest(ChannelsLiveServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="ap-kernels-browser-"))
        broker = cls.tmp / "broker"
        for sub in ("out", "processed", "control"):
            (broker / sub).mkdir(parents=True)
        # Submitting from the form sends a task; a filesystem broker takes it (no worker consumes it here).
        cls._broker = (app.conf.broker_url, app.conf.broker_transport_options)
        app.conf.broker_url = "filesystem://"
        app.conf.broker_transport_options = {"data_folder_in": str(broker / "out"), "data_folder_out": str(broker / "out"),
                                             "control_folder": str(broker / "control"), "store_processed": False}
        layers = copy.deepcopy(settings.CHANNEL_LAYERS)
        if settings.REDIS_URL:
            layers["default"]["CONFIG"]["prefix"] = f"kbrowser-{os.getpid()}"
        cls._settings = override_settings(ARTIFACT_ROOT=cls.tmp / "artifacts", CHANNEL_LAYERS=layers,
                                          PROGRESS_POLL_SECONDS=0 if settings.REDIS_URL else 0.5)
        cls._settings.enable()
        settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = connection.settings_dict["NAME"]
        super().setUpClass()
        from playwright.sync_api import sync_playwright

        # one browser for the class: starting Chromium is the slowest step of these tests
        cls._pw = sync_playwright().start()
        cls.browser = cls._pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls._pw.stop()
        super().tearDownClass()
        # Later tests must not send tasks into this class's (deleted) broker folder: restore the broker and drop
        # the producer pools connected to it.
        app.conf.broker_url, app.conf.broker_transport_options = cls._broker
        app._pool = None  # forget, not close: kombu's pool registry would hand a closed pool to the next user
        app.amqp._producer_pool = None
        cls._settings.disable()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        user = get_user_model().objects.create_user("alice", password="alice-password-1")
        self.project = create_project(name="Kernel Lab", owner=user)
        services.store_contracts(PARSED)
        self.context = self.browser.new_context(viewport={"width": 1400, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(20000)
        ARTIFACTS.mkdir(exist_ok=True)

    def tearDown(self):
        self.context.close()

    def sign_in(self):
        self.page.goto(f"{self.live_server_url}/login/")
        self.page.fill("#id_username", "alice")
        self.page.fill("#id_password", "alice-password-1")
        self.page.click("button[type=submit]")
        self.page.wait_for_url(f"**/p/{self.project.slug}/")

    def test_matrix_shows_coloured_verdicts_grades_and_interop(self):
        passing = {c: "PASS" for c in ("C-PRC-01", "C-PRC-02", "C-PRC-03", "C-PRC-04", "C-ORD-01", "C-EXC-01", "C-EXC-02")}
        finished_submission(self.project, "workers.contracts.impls.reference", passing)
        finished_submission(self.project, "workers.contracts.impls.reference", {**passing, "C-PRC-01": "FAIL"}, device="cuda")
        finished_submission(self.project, "vendor.fast_kernels", {**passing, "C-EXC-02": "QUALITY_WARNING",
                                                                   "C-ORD-01": "CRASH"})
        page = self.page
        self.sign_in()
        page.click("text=Kernels")
        page.wait_for_selector("#matrix")
        assert page.locator("#matrix thead th.col").count() == 3
        assert page.locator("#matrix tbody tr").count() == 12  # every contract of the suite has a row
        assert page.locator("td.cell.v-FAIL").count() == 1 and page.locator("td.cell.v-CRASH").count() == 1
        fail_colour = page.eval_on_selector("td.cell.v-FAIL", "e => getComputedStyle(e).backgroundColor")
        pass_colour = page.eval_on_selector("td.cell.v-PASS", "e => getComputedStyle(e).backgroundColor")
        assert fail_colour != pass_colour and fail_colour == "rgb(249, 215, 211)"
        assert page.inner_text("#interop-score") == "71%"  # 5 of the 7 contracts run pass on all three columns
        assert "PRC" in page.inner_text("#matrix thead") and "∞" in page.inner_text("td.cell.v-FAIL")
        page.screenshot(path=str(ARTIFACTS / "kernels-matrix.png"), full_page=True)
        page.click("#matrix tbody tr:first-child td.contract a")
        page.wait_for_selector("#part-measurement_protocol")
        assert page.locator("section.part").count() == 8
        page.screenshot(path=str(ARTIFACTS / "kernels-contract.png"), full_page=True)

    def test_submission_rows_fill_in_live(self):
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/kernels/submit/")
        assert "sandbox" in page.inner_text("#sandbox-note") and "submit role" in page.inner_text("#sandbox-note")
        page.fill("#impl", "workers.contracts.impls.reference")
        page.check("input[name=contracts][value^='C-EXC-01/']")
        page.check("input[name=contracts][value^='C-PRC-03/']")
        page.screenshot(path=str(ARTIFACTS / "kernels-submit-form.png"), full_page=True)
        page.click("#submit-button")
        page.wait_for_selector("#verdicts")
        page.wait_for_function("document.getElementById('live-dot').classList.contains('on')")
        page.evaluate("window.__sameDocument = true")  # survives only if the page is never reloaded
        submission = Submission.objects.get(project=self.project)
        assert [e["class"] for e in submission.plan] == ["C-PRC-03", "C-EXC-01"]  # the suite's order
        assert page.locator("#verdicts tbody tr.pending").count() == 2

        # The test stands in for the worker from here, writing from another thread as a worker would (the
        # Playwright event loop owns this thread, so job events could not be published from it).
        job = in_worker_thread(lambda: jobs.start_job(submission.job_id))
        in_worker_thread(lambda: (record(submission, "C-EXC-01", "PASS", margin=0.0),
                                  jobs.report_progress(job, 0.5, "C-EXC-01: PASS")))
        page.wait_for_function("document.querySelector('tr[data-contract^=\"C-EXC-01/\"]').dataset.verdict === 'PASS'")
        assert page.locator("#verdicts tbody tr.pending").count() == 1 and page.inner_text("#job-state") == "running"
        in_worker_thread(lambda: (record(submission, "C-PRC-03", "FAIL"),
                                  services.finish_submission(submission, grade([v.detail for v in submission.verdicts.all()])),
                                  jobs.finish_job(job, {"submission": submission.pk})))
        page.wait_for_function("document.getElementById('job-state').textContent === 'succeeded'")
        page.wait_for_function("document.querySelector('tr[data-contract^=\"C-PRC-03/\"]').dataset.verdict === 'FAIL'")
        # the grade can land one fetch after the last row (a fetch may have read the verdict before the grade)
        page.wait_for_function("document.getElementById('grade').innerText.includes('KC-C')")
        assert page.evaluate("window.__sameDocument") is True and page.inner_text("#job-pct") == "100%"
        page.screenshot(path=str(ARTIFACTS / "kernels-submission-live.png"), full_page=True)
