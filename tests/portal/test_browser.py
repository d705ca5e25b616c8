"""A person in the system Chromium: signs in, uploads a run log by the drop zone's file picker, opens the
validation job while it is still queued, and watches it finish live (no reload) once a worker starts."""
from __future__ import annotations

import copy
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker
from channels.testing import ChannelsLiveServerTestCase
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings

from audit_portal.accounts.services import create_project
from audit_portal.celery import app

from .conftest import gz, jsonl, records

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="system Chromium not installed (apt-get install chromium)")]


class BrowserUploadTest(ChannelsLiveServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="ap-browser-"))
        cls._broker = (app.conf.broker_url, app.conf.broker_transport_options)
        broker = cls.tmp / "broker"
        for sub in ("out", "processed", "control"):
            (broker / sub).mkdir(parents=True)
        # A filesystem broker: the web server (a separate process) and the worker (a thread here) share it.
        app.conf.broker_url = "filesystem://"
        app.conf.broker_transport_options = {"data_folder_in": str(broker / "out"), "data_folder_out": str(broker / "out"),
                                             "control_folder": str(broker / "control"), "store_processed": False}
        layers = copy.deepcopy(settings.CHANNEL_LAYERS)
        if settings.REDIS_URL:
            layers["default"]["CONFIG"]["prefix"] = f"browser-{os.getpid()}"
        cls._settings = override_settings(ARTIFACT_ROOT=cls.tmp / "artifacts", CHANNEL_LAYERS=layers,
                                          PROGRESS_POLL_SECONDS=0 if settings.REDIS_URL else 0.5)
        cls._settings.enable()
        settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = connection.settings_dict["NAME"]
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls._settings.disable()
        app.conf.broker_url, app.conf.broker_transport_options = cls._broker
        app._pool = None  # forget, not close: kombu's pool registry would hand a closed pool to the next user
        app.amqp._producer_pool = None
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        user = get_user_model().objects.create_user("alice", password="alice-password-1")
        self.project = create_project(name="Browser Lab", owner=user)
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        self.page = self.browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.set_default_timeout(20000)
        ARTIFACTS.mkdir(exist_ok=True)

    def tearDown(self):
        self.browser.close()
        self._pw.stop()

    def sign_in(self):
        self.page.goto(f"{self.live_server_url}/login/")
        self.page.fill("#id_username", "alice")
        self.page.fill("#id_password", "alice-password-1")
        self.page.click("button[type=submit]")
        self.page.wait_for_url(f"**/p/{self.project.slug}/")

    def test_upload_and_watch_the_job_finish_live(self):
        import workers.tasks  # noqa: F401 - registers tasks with the app, as the worker command does

        page = self.page
        self.sign_in()
        page.click("text=Uploads")
        run_file = self.tmp / "run.jsonl.gz"
        run_file.write_bytes(gz(jsonl(records(trajectories=12))))
        page.set_input_files("#file-input", str(run_file))
        page.wait_for_selector("#upload-ok")
        assert "received" in page.inner_text("#upload-ok")
        page.click("#upload-job-link")
        page.wait_for_selector("#job-state")
        assert page.inner_text("#job-state") == "queued"  # no worker yet
        page.wait_for_function("document.getElementById('live-dot').classList.contains('on')")
        with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=10):
            page.wait_for_function("document.getElementById('job-state').textContent === 'succeeded'", timeout=60000)
        assert page.inner_text("#job-pct") == "100%"
        assert page.inner_text("#subject-stage") == "valid"  # updated live from the job's result
        page.screenshot(path=str(ARTIFACTS / "job-finished-live.png"), full_page=True)
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/uploads/")
        assert "valid" in page.inner_text("table")
        page.screenshot(path=str(ARTIFACTS / "uploads.png"), full_page=True)

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
        page.screenshot(path=str(ARTIFACTS / "upload-error.png"), full_page=True)

    def test_run_page_draws_the_certificate(self):
        from audit_portal.jobs.models import Job
        from audit_portal.runs.services import receive_upload
        from audit_portal.runs.upload_handler import hashed_file_from_path, incoming_dir
        from workers.tasks import certify_upload, validate_upload

        path = incoming_dir() / "cert.jsonl.gz"
        path.write_bytes(gz(jsonl(records(trajectories=16))))
        upload, _ = receive_upload(project=self.project, uploaded=hashed_file_from_path(path), submitted_by="alice")
        validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk)
        certify_upload(Job.objects.get(subject_id=upload.pk, kind="certify_upload").pk)
        upload.refresh_from_db()
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
        page.screenshot(path=str(ARTIFACTS / "run-certificate.png"), full_page=True)
