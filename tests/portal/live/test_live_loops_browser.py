"""Loops that close without a reload, in the system Chromium: an upload's banner and table row follow its validation,
then its certificate and fidelity jobs, and link to what they made; a job finishing raises a notification (in the page,
and in the browser once allowed); an invalid file reads "finished: invalid (N errors)"; the feed keeps true order."""

from __future__ import annotations

import threading
from datetime import timedelta

from celery.contrib.testing.worker import start_worker
from django.utils import timezone

from audit_portal import task_names
from audit_portal.celery import app

from ..browser import BrowserTestCase, browser_marks
from ..conftest import gz, jsonl, records

pytestmark = browser_marks

# Records every browser notification the page raises (the real constructor is still called).
RECORD_NOTIFICATIONS = """
(() => {
  const Real = window.Notification;
  window.__notifications = [];
  if (!Real) return;
  const Recorded = function (title, options) { window.__notifications.push({title, body: (options || {}).body}); return new Real(title, options); };
  Object.defineProperty(Recorded, "permission", {get: () => Real.permission});
  Recorded.requestPermission = (...a) => Real.requestPermission(...a);
  window.Notification = Recorded;
})();
"""


class LiveLoopsTest(BrowserTestCase):
    broker = "filesystem"

    def test_upload_banner_follows_validation_certificate_and_audit_then_links_the_certificate(self):
        import pipelines  # noqa: F401 - registers the tasks, as the worker command does

        self.context.grant_permissions(["notifications"], origin=self.live_server_url)
        self.context.add_init_script(RECORD_NOTIFICATIONS)
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/uploads/")
        run_file = self.tmp / "live.jsonl.gz"
        run_file.write_bytes(gz(jsonl(records(trajectories=10))))
        page.set_input_files("#file-input", str(run_file))
        page.wait_for_selector("#upload-ok")
        assert page.inner_text("#upload-stage") == "received"
        upload_id = page.get_attribute("#upload-ok", "data-upload-id")
        # the new upload is in the table at once, before any reload
        assert page.locator(f'#uploads-table tr[data-upload-id="{upload_id}"]').count() == 1
        assert page.inner_text("#uploads-total") == "1"
        assert not page.is_visible("#notify-ask")  # permission already granted: nothing to ask
        page.wait_for_selector('#upload-jobs li[data-kind="validate_upload"]')
        assert "queued" in page.inner_text('#upload-jobs li[data-kind="validate_upload"]')
        # the upload's own page, open in a second tab, follows it too
        detail = self.context.new_page()
        detail.goto(f"{self.live_server_url}/p/{self.project.slug}/uploads/{upload_id}/")
        detail.wait_for_function("document.getElementById('live-dot').classList.contains('on')")
        assert detail.locator("#upload-job-rows tr").count() == 1
        # toasts dismiss themselves after a while: record each one as it appears
        page.evaluate(
            "window.__toasts = []; new MutationObserver((ms) => ms.forEach((m) => m.addedNodes.forEach("
            "(n) => n.classList && n.classList.contains('toast') && window.__toasts.push(n.innerText))))"
            ".observe(document.getElementById('toasts'), {childList: true})"
        )
        with start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=10):
            page.wait_for_function("document.getElementById('upload-stage').textContent === 'valid'", timeout=60000)
            # the follow-up jobs appear in the banner and finish there, linked to what they made
            page.wait_for_selector("#upload-product-certify_upload", timeout=120000)
            page.wait_for_selector("#upload-product-fidelity_audit", timeout=120000)
        assert detail.inner_text("h1 [data-field=stage]") == "valid"
        detail.wait_for_function("document.querySelectorAll('#upload-job-rows tr').length === 3")
        assert detail.inner_text("#upload-job-rows").count("finished") == 3
        detail.close()
        row_badge = page.locator(f'#uploads-table tr[data-upload-id="{upload_id}"] [data-field=stage]')
        assert row_badge.inner_text() == "valid"
        banner = page.inner_text("#upload-jobs")
        assert banner.count("finished") == 3, banner
        # each job that finished while the page was open raised an in-page notification and a browser one
        page.wait_for_function("window.__toasts.length >= 3")
        toasts = "\n".join(page.evaluate("window.__toasts"))
        assert "finished: valid" in toasts and "open the certificate" in toasts
        notes = page.evaluate("window.__notifications")
        assert len(notes) >= 3 and any("finished" in n["title"] for n in notes), notes
        self.screenshot("upload-live-banner.png")
        page.click("#upload-product-certify_upload")
        page.wait_for_url("**/runs/*/?certificate=*")
        page.wait_for_function("document.body.dataset.figures === 'ready'", timeout=30000)
        assert "/runs/" in page.url and "certificate=" in page.url
        self.screenshot("upload-to-certificate.png")

    def test_an_invalid_file_reads_finished_invalid_with_its_error_count(self):
        from audit_portal.runs import upload_handler

        recs = records(trajectories=40)  # > the shortened pre-flight head: only the validation job sees the bad lines
        data = jsonl(recs) + b'{"schema": "fcr/1", "run_id": "demo-run"}\n' * 2
        head_bytes, upload_handler.HEAD_BYTES = upload_handler.HEAD_BYTES, 16 * 1024
        try:
            upload, outcomes = self.processed_upload("broken.jsonl", data)
        finally:
            upload_handler.HEAD_BYTES = head_bytes
        assert outcomes["validate_upload"] == "succeeded" and upload.stage == "invalid"
        from audit_portal.jobs.models import Job

        job = Job.objects.get(subject_id=upload.pk, kind="validate_upload")
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/jobs/{job.pk}/")
        n = upload.error_count
        expected = f"finished: invalid ({n} error{'s' if n != 1 else ''})"
        assert page.inner_text("#job-state") == expected
        assert "succeeded" not in page.inner_text("#job-card")
        page.click("#job-product a")
        page.wait_for_url(f"**/uploads/{upload.pk}/")
        assert "First errors" in page.inner_text("main")
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/uploads/")
        assert page.inner_text(f'tr[data-upload-id="{upload.pk}"] [data-field=stage]') == expected.replace(
            "finished: ", ""
        )
        self.screenshot("invalid-upload.png")

    def test_the_activity_feed_keeps_jobs_in_true_order_with_their_age(self):
        from audit_portal.jobs.models import Job
        from audit_portal.jobs.services import create_job

        now = timezone.now()
        made = []
        for i in range(16):  # one more than the overview lists
            job = create_job(
                project=self.project,
                kind="validate_upload",
                task_name=task_names.VALIDATE_UPLOAD,
                title=f"job {i}",
                enqueue=False,
            )
            Job.objects.filter(pk=job.pk).update(created_at=now - timedelta(days=2) + timedelta(minutes=10 * i))
            made.append(job.pk)
        # the oldest job (not listed) was touched last: the socket's snapshot (latest updated first) carries it, and a
        # feed that put every unknown job on top showed it there as "just now"
        Job.objects.filter(pk=made[0]).update(message="touched", state="running")
        page = self.page
        self.sign_in()
        page.wait_for_function("document.getElementById('live-dot').classList.contains('on')")
        page.wait_for_timeout(500)  # the socket's snapshot has been applied

        def order():
            return [int(x) for x in page.eval_on_selector_all("#job-feed tr", "rs => rs.map(r => r.dataset.jobId)")]

        assert order() == sorted(made, reverse=True)[:15]
        ages = page.eval_on_selector_all("#job-feed time", "ts => ts.map(t => t.textContent)")
        assert "just now" not in " ".join(ages) and all(a.endswith("ago") for a in ages), ages
        # a new job arrives on top, live, and the list stays 15 long (created from another thread: Playwright's event
        # loop runs in this one, where the channel layer cannot publish)
        maker = threading.Thread(
            target=create_job,
            kwargs=dict(
                project=self.project,
                kind="validate_upload",
                task_name=task_names.VALIDATE_UPLOAD,
                title="newest",
                enqueue=False,
            ),
        )
        maker.start()
        maker.join()
        page.wait_for_function(f"document.querySelector('#job-feed tr').dataset.jobId !== '{max(made)}'")
        assert order()[0] > max(made) and len(order()) == 15
        assert page.inner_text("#job-feed tr:first-child time") == "just now"
