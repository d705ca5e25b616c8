"""A person in the system Chromium opens a run's fidelity audit from the run page (the spec's worked examples A, C, D
as the upload), sees the FAIL verdict and the one closed-failure violation, the figures drawn, then drills into the
violating call: tokens decoded with the registered §7.1 tokenizer, the sentinel position coloured and explained."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from channels.testing import ChannelsLiveServerTestCase
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings

from audit_portal.accounts.services import create_project

from .conftest import jsonl
from .test_fidelity_job import TOY_VOCAB_TEXT, examples

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="system Chromium not installed (apt-get install chromium)")]


def _drop_producer_pools(app):
    if app._pool is not None:
        app._pool.force_close_all()
    app._pool = None
    app.amqp._producer_pool = None


class FidelityPageTest(ChannelsLiveServerTestCase):
    @classmethod
    def setUpClass(cls):
        from audit_portal.celery import app

        # Jobs here run synchronously in the test; no message may reach a real broker. Restored after the class.
        cls._broker = (app.conf.broker_url, app.conf.broker_transport_options)
        app.conf.broker_url, app.conf.broker_transport_options = "memory://", {}
        _drop_producer_pools(app)  # an earlier class may have left them connected to its (deleted) broker folder
        cls.tmp = Path(tempfile.mkdtemp(prefix="ap-fidelity-browser-"))
        cls._settings = override_settings(ARTIFACT_ROOT=cls.tmp / "artifacts")
        cls._settings.enable()
        settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = connection.settings_dict["NAME"]
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        from audit_portal.celery import app

        super().tearDownClass()
        cls._settings.disable()
        app.conf.broker_url, app.conf.broker_transport_options = cls._broker
        _drop_producer_pools(app)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        user = get_user_model().objects.create_user("fiona", password="fiona-password-1")
        self.project = create_project(name="Fidelity Lab", owner=user)
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

    def audited_upload(self):
        from audit_portal.fidelity.services import register_tokenizer
        from audit_portal.jobs.models import Job
        from audit_portal.runs.services import receive_upload
        from audit_portal.runs.upload_handler import hashed_file_from_path, incoming_dir
        from workers.tasks import fidelity_audit, validate_upload

        register_tokenizer(project=self.project, data=TOY_VOCAB_TEXT.encode(), name="toy §7.1", uploaded_by="fiona")
        path = incoming_dir() / "examples.jsonl"
        path.write_bytes(jsonl(examples()))
        upload, _ = receive_upload(project=self.project, uploaded=hashed_file_from_path(path), submitted_by="fiona")
        validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk)
        assert fidelity_audit(Job.objects.get(subject_id=upload.pk, kind="fidelity_audit").pk) == "succeeded"
        upload.refresh_from_db()
        return upload

    def test_fidelity_page_and_call_drill_down(self):
        upload = self.audited_upload()
        page = self.page
        page.goto(f"{self.live_server_url}/login/")
        page.fill("#id_username", "fiona")
        page.fill("#id_password", "fiona-password-1")
        page.click("button[type=submit]")
        page.wait_for_url(f"**/p/{self.project.slug}/")
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{upload.run_id}/")
        page.click("#fidelity-link")
        page.wait_for_function("document.body.dataset.figures === 'ready'")
        assert page.inner_text("#verdict-value") == "FAIL"
        assert page.inner_text("#cf-count") == "1"
        for fig in ("fig-coverage", "fig-reasons-any", "fig-steps", "fig-trajectories", "fig-alignment", "fig-ledger",
                    "fig-provenance", "fig-certificates"):
            assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
        assert "SENTINEL_LOGPROB" in page.inner_text("#fig-coverage")  # a stacked segment per exclusion reason
        assert "toy §7.1" in page.inner_text("#tokenizer-card")
        assert "background:title" in page.inner_text("#ledger-table")
        page.screenshot(path=str(ARTIFACTS / "fidelity-run.png"), full_page=True)

        page.click("#calls-table >> text=tD-0")
        page.wait_for_selector("#tokens")
        assert page.inner_text("#call-verdict") == "partial"
        assert "toy §7.1" in page.inner_text("#tokenizer-note")
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
        page.screenshot(path=str(ARTIFACTS / "fidelity-call.png"), full_page=True)
