"""The browser upload form sends a file above ``UPLOAD_PARTS_ABOVE_BYTES`` as a resumable upload in parts
(static/js/upload.js over audit_portal/runs/chunked_api.py): a part cut off once is retried and gets through; a part
that never gets through (the network is gone) leaves the session open, and after a reload choosing the same file
sends only the parts the server lacks, then completes into an ordinary upload that validates."""

from __future__ import annotations

import hashlib

from django.test import override_settings

from audit_portal.jobs.models import Job
from audit_portal.runs import chunked
from audit_portal.runs.models import Upload, UploadSession

from ..browser import BrowserTestCase, browser_marks
from ..conftest import jsonl, records

pytestmark = browser_marks
PART = 16 * 1024
THRESHOLD = 4096  # lowered for the test; what ships is settings.UPLOAD_PARTS_ABOVE_BYTES (32 MiB)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BrowserPartsUploadTest(BrowserTestCase):
    broker = "filesystem"  # the live server queues the validation job; the test runs it itself

    @classmethod
    def setUpClass(cls):
        # before the live server's process is forked, so that it answers the small parts and the low threshold
        cls._parts = override_settings(UPLOAD_PARTS_ABOVE_BYTES=THRESHOLD)
        cls._parts.enable()
        cls._part_bytes, chunked.PART_BYTES = chunked.PART_BYTES, PART
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        chunked.PART_BYTES = cls._part_bytes
        cls._parts.disable()

    def test_a_large_file_goes_in_parts_survives_a_dropped_part_and_resumes_after_a_reload(self):
        from pipelines import validate_upload

        data = jsonl(records(trajectories=12))
        count = -(-len(data) // PART)
        assert count >= 6, count
        path = self.tmp / "big-run.jsonl"
        path.write_bytes(data)
        page = self.page
        self.sign_in()
        uploads = f"{self.live_server_url}/p/{self.project.slug}/uploads/"
        page.goto(uploads)
        assert page.get_attribute("#dropzone", "data-parts-above") == str(THRESHOLD)

        puts: list[tuple[int, str | None]] = []
        page.on(
            "request",
            lambda r: puts.append((int(r.url.rstrip("/").rsplit("/", 1)[1]), r.headers.get("x-part-sha256")))
            if r.method == "PUT"
            else None,
        )
        cut = []

        def cut_once(route):  # part 1: the first try is cut off, the retry gets through
            if not cut:
                cut.append(1)
                route.abort("connectionreset")
            else:
                route.continue_()

        page.route("**/parts/1/", cut_once)
        page.route("**/parts/3/", lambda route: route.abort("internetdisconnected"))  # never gets through
        page.set_input_files("#file-input", str(path))
        page.wait_for_selector("#upload-error", timeout=60000)
        assert page.get_attribute("#upload-status", "data-mode") == "parts"
        assert "Choose the same file again" in page.inner_text("#upload-error")
        session = UploadSession.objects.get(pk=page.get_attribute("#upload-status", "data-session-id"))
        first = set(session.parts_received)
        assert session.state == "open" and session.sha256 == "" and 1 in first and 3 not in first
        assert [n for n, _ in puts].count(1) == 2  # cut off, then retried
        assert [n for n, _ in puts].count(3) == 5  # tried five times with backoff, then given up
        assert not Upload.objects.exists()
        assert page.evaluate("Object.keys(localStorage).filter((k) => k.startsWith('portal-upload:')).length") == 1

        # the network is back; the page is reloaded and the same file chosen again
        page.unroute("**/parts/1/")
        page.unroute("**/parts/3/")
        puts.clear()
        page.reload()
        page.set_input_files("#file-input", str(path))
        page.wait_for_selector("#upload-ok", timeout=60000)
        assert "resuming" in page.inner_text("#upload-name")
        assert sorted(n for n, _ in puts) == sorted(set(range(count)) - first)  # only the missing parts
        for n, digest in puts:
            assert digest == sha(data[n * PART : (n + 1) * PART])  # each part carries its SHA-256
        assert page.inner_text("#upload-pct") == "100%"
        upload = Upload.objects.get(pk=page.get_attribute("#upload-ok", "data-upload-id"))
        assert upload.sha256 == sha(data) and upload.size_bytes == len(data)  # computed by the server
        from django.conf import settings

        assert (settings.ARTIFACT_ROOT / upload.storage_name).read_bytes() == data
        assert UploadSession.objects.get(pk=session.pk).state == "completed"
        assert page.evaluate("Object.keys(localStorage).filter((k) => k.startsWith('portal-upload:')).length") == 0
        assert validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk) == "succeeded"
        upload.refresh_from_db()
        assert upload.stage == "valid"
        page.goto(uploads)
        assert "valid" in page.inner_text("#uploads-table")
        self.screenshot("upload-in-parts.png")

    def test_a_small_file_keeps_the_single_request(self):
        path = self.tmp / "small.jsonl"
        path.write_bytes(jsonl(records(trajectories=1))[:THRESHOLD])  # at the threshold: not above it
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/uploads/")
        posts = []
        page.on("request", lambda r: posts.append(r.url) if r.method in ("POST", "PUT") else None)
        page.set_input_files("#file-input", str(path))
        page.wait_for_selector("#upload-ok, #upload-error")
        assert page.get_attribute("#upload-status", "data-mode") == "whole"
        assert posts == [f"{self.live_server_url}/api/v1/projects/{self.project.slug}/uploads/"]

    def test_past_the_open_session_limit_the_form_falls_back_to_one_request(self):
        for i in range(chunked.MAX_OPEN_SESSIONS):  # abandoned uploads in parts (from other tabs or clients)
            chunked.create_session(
                project=self.project, size=PART, sha256=None, name=f"left-{i}.jsonl", created_by=self.username
            )
        data = jsonl(records(trajectories=12))
        path = self.tmp / "fallback.jsonl"
        path.write_bytes(data)
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/uploads/")
        writes = []
        page.on("request", lambda r: writes.append((r.method, r.url)) if r.method in ("POST", "PUT") else None)
        page.set_input_files("#file-input", str(path))
        page.wait_for_selector("#upload-ok")
        assert page.get_attribute("#upload-status", "data-mode") == "whole"
        assert "in one request" in page.inner_text("#upload-name")
        api = f"{self.live_server_url}/api/v1/projects/{self.project.slug}"
        assert writes == [("POST", f"{api}/upload-sessions/"), ("POST", f"{api}/uploads/")]
        assert Upload.objects.get(pk=page.get_attribute("#upload-ok", "data-upload-id")).sha256 == sha(data)

    def test_the_form_sends_run_parameters_and_tags_with_either_kind_of_upload(self):
        """The fields above the drop zone: a refused value is shown on its field and stores nothing; then the same
        form sends them with a small file (one request) and a large one (in parts), and once the uploads are valid
        the runs table shows their parameters and tags."""
        from workers.fcr.synth import SynthConfig, iter_run

        from pipelines import validate_upload

        small = self.tmp / "form-small.jsonl"
        small.write_bytes(
            jsonl(list(iter_run(SynthConfig(trajectories=1, run_id="form-whole", response_len=(2, 4))))[:1])
        )
        assert small.stat().st_size <= THRESHOLD
        big = self.tmp / "form-big.jsonl"
        big.write_bytes(jsonl(records(trajectories=8, run_id="form-parts")))
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/uploads/")
        assert page.inner_text("label[for=upload-config]").startswith("Run parameters")
        assert "JSON object" in page.inner_text("#upload-config-help")
        assert "Comma-separated" in page.inner_text("#upload-tags-help")

        page.fill("#upload-config", "{lr: 1}")
        page.fill("#upload-tags", "browser")
        page.set_input_files("#file-input", str(small))
        page.wait_for_selector("#upload-error")
        assert page.get_attribute("#upload-error", "data-field") == "config"
        assert page.inner_text("#upload-error").startswith("Run parameters (a JSON object): not valid JSON")
        assert page.get_attribute("#upload-config", "aria-invalid") == "true"
        assert not Upload.objects.exists()

        page.fill("#upload-config", '{"optim": {"lr": 1e-6}, "algo": "grpo"}')
        page.fill("#upload-tags", "browser, grpo")
        page.set_input_files("#file-input", str(small))
        page.wait_for_selector("#upload-ok")
        assert page.get_attribute("#upload-status", "data-mode") == "whole"
        assert (
            page.inner_text("#upload-tags-sent") == "browser, grpo"
            and page.inner_text("#upload-params") == "2 parameters"
        )
        assert page.get_attribute("#upload-config", "aria-invalid") is None
        whole = page.get_attribute("#upload-ok", "data-upload-id")

        page.fill("#upload-config", '{"optim": {"lr": 3e-6}, "algo": "ppo"}')
        page.fill("#upload-tags", "browser, in-parts")
        page.set_input_files("#file-input", str(big))
        page.wait_for_selector("#upload-ok", timeout=60000)
        assert page.get_attribute("#upload-status", "data-mode") == "parts"
        parts = page.get_attribute("#upload-ok", "data-upload-id")
        assert parts != whole and page.inner_text("#upload-tags-sent") == "browser, in-parts"

        for upload_id in (whole, parts):
            assert validate_upload(Job.objects.get(subject_id=upload_id, kind="validate_upload").pk) == "succeeded"
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/?cols=params.optim.lr,params.algo,tags&sort=name")
        cells = page.eval_on_selector_all(
            "#runs-table tbody tr",
            "rows => rows.map(r => ['name', 'params.optim.lr', 'params.algo'].map("
            "c => r.querySelector(`[data-column='${c}']`).innerText.trim()).concat("
            "[Array.from(r.querySelectorAll('[data-tag]')).map(t => t.dataset.tag).join(',')]))",
        )
        assert cells == [
            ["form-parts", "3e-06", "ppo", "browser,in-parts"],
            ["form-whole", "1e-06", "grpo", "browser,grpo"],
        ], cells
        self.screenshot("upload-form-params.png")
