"""Toasts in the system Chromium: a job that finishes while a project page is open raises a toast that says the run's
verdict, and the toast leaves by itself — unless the keyboard is on it (then it stays until focus leaves)."""

from __future__ import annotations

import threading

from audit_portal import task_names

from ..browser import BrowserTestCase, browser_marks

pytestmark = browser_marks
GONE = 40000  # ms: generous against a busy machine; the toast's own delay is static/js/live.js TOAST_MS (15 s)


class ToastTest(BrowserTestCase):
    broker = "memory"  # nothing is sent: the jobs are made and finished here

    def finished_elsewhere(self, verdict: str) -> int:
        """A certification job made, started and finished in another thread (the channel layer cannot publish from
        the one Playwright's event loop runs in), as a worker would; returns its id."""
        from django.db import connection

        from audit_portal.jobs import services as jobs

        made = {}

        def work():
            try:
                job = jobs.create_job(
                    project=self.project,
                    kind="certify_upload",
                    task_name=task_names.CERTIFY_UPLOAD,
                    title="certify run.jsonl",
                    enqueue=False,
                )
                jobs.finish_job(jobs.start_job(job.pk), {"verdict": verdict, "data_errors": 0})
                made["id"] = job.pk
            finally:
                connection.close()  # the thread's own connection: left open, it keeps the test database in use

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        return made["id"]

    def toast(self, job_id: int) -> str:
        return f'#toasts .toast[data-job-id="{job_id}"]'

    def test_a_toast_says_the_verdict_and_leaves_by_itself_unless_focused(self):
        page = self.page
        self.sign_in()
        page.wait_for_function("document.getElementById('live-dot').classList.contains('on')")
        kept = self.finished_elsewhere("vacuous")
        page.wait_for_selector(self.toast(kept))
        assert "finished: not certified: the bound says nothing" in page.inner_text(self.toast(kept))
        page.focus(f"{self.toast(kept)} .toast-close")  # the keyboard is on it: it must wait
        left = self.finished_elsewhere("certified")
        page.wait_for_selector(self.toast(left))
        # the later, unfocused toast leaves by itself; the earlier one, focused, is still there when it has gone
        page.wait_for_selector(self.toast(left), state="detached", timeout=GONE)
        assert page.locator(self.toast(kept)).count() == 1
        page.locator("header a").first.focus()
        page.wait_for_selector(self.toast(kept), state="detached", timeout=GONE)  # focus left: it goes too
