"""Issue 18, done when: steps of a run streamed through the client library reach the portal while it "trains"; the run
page, open in the system Chromium, follows them over the websocket (the run so far: steps, ε̂, B*, the budget verdict,
the figure over steps) without a reload; and a budget rule fires once when the run's B* crosses it — on the run page,
on the alerts page open in another tab, and as a webhook a local receiver gets and verifies (HMAC signature with the
rule's secret)."""

from __future__ import annotations

import json

from celery.contrib.testing.worker import start_worker
from django.test import override_settings

from audit_portal.accounts.services import issue_api_key
from audit_portal.alerts import services as alert_services
from audit_portal.alerts import webhooks
from audit_portal.alerts.models import WebhookDelivery
from audit_portal.celery import app
from audit_portal.live.models import LiveRun

from ..alert_receiver import Receiver
from ..browser import BrowserTestCase, browser_marks
from ..live_steps import step_batch
from ..pipelines.test_celery_integration import wait_for

pytestmark = browser_marks


class LiveRunBrowserTest(BrowserTestCase):
    broker = "filesystem"

    def live_steps(self, n, timeout=120):
        return wait_for(
            lambda: (LiveRun.objects.filter(run__name="stream").values_list("steps", flat=True).first() or []).__len__()
            >= n,
            timeout,
        )

    def test_streamed_steps_update_the_run_page_and_a_crossed_budget_fires_its_webhook_once(self):
        import pipelines  # noqa: F401 - registers the tasks, as the worker command does
        from audit_portal_client import Client

        token = issue_api_key(project=self.project, name="trainer", scopes=["read", "submit"]).token
        rx = Receiver()
        self.addCleanup(rx.close)
        run = Client(self.live_server_url, token, timeout=10).run(
            self.project.slug, "stream", spool_dir=self.tmp / "spool", segment_steps=2, max_backoff=1.0
        )
        with (
            override_settings(ALERT_WEBHOOK_ALLOW_PRIVATE=True, ALERT_WEBHOOK_BACKOFF_SECONDS=1),
            start_worker(app, pool="solo", perform_ping_check=False, queues=["cpu"], shutdown_timeout=30),
        ):
            for step in (0, 1):  # a quiet start: rollout and trainer agree closely
                run.log_step(step, **step_batch(step, noise=0.002))
            run.flush()  # a segment holds whole steps: without a next step, flush sends these two now
            assert self.live_steps(2), run.status()
            live = LiveRun.objects.get(run__name="stream")
            quiet_best = live.certificate["bounds"]["best"]
            budget = quiet_best * 1.5  # the run meets it so far
            rule = alert_services.create_rule(
                project=self.project,
                created_by="t",
                data={"name": "B* budget", "kind": "budget", "threshold": budget, "webhook_url": rx.url},
            )

            self.sign_in()
            page = self.page
            page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{live.run_id}/")
            page.wait_for_selector('#live-run[data-steps="2"]')
            page.wait_for_function("document.getElementById('run-live-dot').classList.contains('on')")
            assert "no budget rule" not in page.inner_text("#live-run")
            assert page.get_attribute("#live-budget .badge", "data-meets") == "true"
            alerts = self.context.new_page()  # the project's alerts page, open in a second tab
            alerts.goto(f"{self.live_server_url}/p/{self.project.slug}/alerts/")
            alerts.wait_for_function("document.getElementById('alerts-page').dataset.live === 'on'")

            for step in (2, 3):  # responses 4x longer, larger mismatch: B* (it grows with the length) passes the budget
                run.log_step(step, **step_batch(step, noise=0.1, T=96))
            run.flush()
            page.wait_for_selector('#live-run[data-steps="4"]', timeout=120000)
            page.wait_for_selector("#live-alerts [role=alert]", timeout=60000)
            assert "B* budget" in page.inner_text("#live-alerts") and "Alert fired" in page.inner_text("#live-alerts")
            assert page.get_attribute("#live-budget .badge", "data-meets") == "false"
            assert page.inner_text("#live-state").startswith("steps 0–3")
            # the figure over steps was drawn from the pushed series (Plotly's traces carry the four steps)
            assert page.evaluate("document.getElementById('fig-live').data[0].x.length") == 4
            self.screenshot("live-run-budget-crossed.png")
            assert rx.got.wait(60), "the webhook never arrived"
            # the training loop can ask too (Run.alerts / Run.live_view: the REST API CI reads)
            assert run.alerts()["firing"] is True and run.live_view()["steps"] == 4
            alerts.wait_for_selector("#event-table tr[data-event-id]")
            assert "fired" in alerts.inner_text("#event-table") and "stream" in alerts.inner_text("#event-table")
            assert alerts.inner_text(f'#rule-table tr[data-rule-id="{rule.pk}"] [data-field=state]') == "firing"

            for step in (4, 5):  # still over the budget: no second event, no second webhook
                run.log_step(step, **step_batch(step, noise=0.1, T=96))
            run.flush()
            page.wait_for_selector('#live-run[data-steps="6"]', timeout=120000)
            result = run.finish(timeout=240)
            assert wait_for(lambda: not WebhookDelivery.objects.filter(state="pending").exists(), 30)

        assert len(rx.requests) == 1 and page.locator("#live-alerts [role=alert]").count() == 1
        req = rx.requests[0]
        h = {k.lower(): v for k, v in req["headers"].items()}
        assert webhooks.verify(rule.secret, h["x-audit-portal-timestamp"], req["body"], h["x-audit-portal-signature"])
        body = json.loads(req["body"])
        assert body["type"] == "alert.fired" and body["rule"]["id"] == rule.pk and body["run"]["name"] == "stream"
        live.refresh_from_db()
        assert body["value"] > budget and live.steps == list(range(6)) and len(live.uploads) == 3
        # the run's certificate at finish is its live view: nothing uploaded or merged a second time
        assert result.certificate["sequences"] == live.certificate["summary"]["sequences"] == 6 * 4
        assert result.best_bound == live.certificate["bounds"]["best"]
        delivery = WebhookDelivery.objects.get()
        assert delivery.state == "delivered" and delivery.last_status == 200
