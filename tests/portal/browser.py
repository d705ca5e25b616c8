"""One base class for the Playwright tests: a live ASGI server (Channels), the system Chromium started once per
class, a signed-in owner of a fresh project, and the isolation every browser test needs (its own artifact store,
broker and channel-layer prefix, restored afterwards)."""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from pathlib import Path

import kombu.pools
import pytest
from channels.testing import ChannelsLiveServerTestCase
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings

from audit_portal.accounts.services import create_project
from audit_portal.celery import app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

browser_marks = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="system Chromium not installed (apt-get install chromium)"),
]


_COLLECTED: dict[int, Path] = {}


def collected_static() -> Path:
    """``collectstatic`` once per test process into a folder of its own: the live servers serve what ships (hashed,
    gzip-compressed, long-cached names through WhiteNoise), never whatever a development server left in var/."""
    from django.core.management import call_command

    if os.getpid() not in _COLLECTED:
        root = Path(tempfile.mkdtemp(prefix="ap-static-"))
        with override_settings(STATIC_ROOT=root):
            call_command("collectstatic", interactive=False, verbosity=0)
        _COLLECTED[os.getpid()] = root
    return _COLLECTED[os.getpid()]


def forget_producer_pools() -> None:
    """Forget (not close) the app's broker pools: kombu's registry would hand a pool closed by an earlier user,
    or one bound to a deleted broker folder, to the next sender."""
    app._pool = None
    app.amqp._producer_pool = None
    kombu.pools.reset()


class BrowserTestCase(ChannelsLiveServerTestCase):
    """Subclasses set ``broker``: "filesystem" when a worker (a thread here) must receive tasks the live server
    (another process) sends, "memory" when jobs run synchronously in the test and nothing may reach a broker."""

    broker = "filesystem"
    serve_static = False  # static files come from WhiteNoise (the middleware), as in production
    username = "alice"
    password = "alice-password-1"
    project_name = "Browser Lab"
    viewport = {"width": 1280, "height": 900}

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix=f"ap-{cls.__name__.lower()}-"))
        cls._broker = (app.conf.broker_url, app.conf.broker_transport_options)
        if cls.broker == "filesystem":
            folder = cls.tmp / "broker"
            for sub in ("out", "processed", "control"):
                (folder / sub).mkdir(parents=True)
            app.conf.broker_url = "filesystem://"
            app.conf.broker_transport_options = {
                "data_folder_in": str(folder / "out"),
                "data_folder_out": str(folder / "out"),
                "control_folder": str(folder / "control"),
                "store_processed": False,
            }
        else:
            app.conf.broker_url, app.conf.broker_transport_options = "memory://", {}
        forget_producer_pools()
        layers = copy.deepcopy(settings.CHANNEL_LAYERS)
        if settings.REDIS_URL:
            layers["default"]["CONFIG"]["prefix"] = f"{cls.__name__.lower()}-{os.getpid()}"
        cls._settings = override_settings(
            ARTIFACT_ROOT=cls.tmp / "artifacts",
            CHANNEL_LAYERS=layers,
            STATIC_ROOT=collected_static(),
            PROGRESS_POLL_SECONDS=0 if settings.REDIS_URL else 0.5,
        )
        cls._settings.enable()
        # the live server's process must open the test database, not the development one
        settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = connection.settings_dict["NAME"]
        super().setUpClass()
        from playwright.sync_api import sync_playwright

        cls._pw = sync_playwright().start()  # one Chromium per class: starting it is the slowest step
        cls.browser = cls._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        ARTIFACTS.mkdir(exist_ok=True)

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls._pw.stop()
        super().tearDownClass()
        cls._settings.disable()
        app.conf.broker_url, app.conf.broker_transport_options = cls._broker
        forget_producer_pools()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.user = get_user_model().objects.create_user(self.username, password=self.password)
        self.project = create_project(name=self.project_name, owner=self.user)
        self.context = self.browser.new_context(viewport=self.viewport)
        self.page = self.context.new_page()
        self.page.set_default_timeout(20000)

    def tearDown(self):
        self.context.close()

    def sign_in(self):
        self.page.goto(f"{self.live_server_url}/login/")
        self.page.fill("#id_username", self.username)
        self.page.fill("#id_password", self.password)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(f"**/p/{self.project.slug}/")

    def processed_upload(self, name: str, data: bytes, kinds=("validate_upload",)):
        """Receive ``data`` as an upload of the project and run its jobs of ``kinds`` synchronously, in order (each
        kind is also the task's name). Returns the refreshed upload and each task's return value."""
        import pipelines
        from audit_portal.jobs.models import Job
        from audit_portal.runs.services import receive_upload
        from audit_portal.runs.upload_handler import hashed_file_from_path, incoming_dir

        path = incoming_dir() / name
        path.write_bytes(data)
        upload, _ = receive_upload(
            project=self.project, uploaded=hashed_file_from_path(path), submitted_by=self.username
        )
        outcomes = {
            kind: getattr(pipelines, kind)(Job.objects.get(subject_id=upload.pk, kind=kind).pk) for kind in kinds
        }
        upload.refresh_from_db()
        return upload, outcomes

    def screenshot(self, name: str) -> None:
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)
