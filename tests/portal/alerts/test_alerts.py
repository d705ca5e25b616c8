"""Alerts (issue 18 part 4): rules decide from a run's metrics, fire once per crossing and re-arm, post a signed
payload to a webhook (retried with backoff, logged), refuse URLs that reach internal addresses unless the setting
allows them, and show their state in the API and on the page."""

from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from audit_portal.accounts.models import Role
from audit_portal.accounts.services import issue_api_key
from audit_portal.alerts import rules, services, webhooks
from audit_portal.alerts.models import AlertEvent, AlertState, WebhookDelivery
from audit_portal.runs.models import Run

from ..alert_receiver import Receiver


def snap(best=None, steps=(), certified=True):
    return {"certified": certified, "best_bound": best, "steps": list(steps)}


def series(key, values, start=0):
    return [{"step": start + i, key: v} for i, v in enumerate(values)]


# --- rules (pure) ----------------------------------------------------------------------------------------------------
def test_budget_rule_compares_best_bound_and_fails_closed_without_a_bound():
    assert rules.evaluate("budget", 0.05, 1, snap(best=0.049)).holds is False
    crossed = rules.evaluate("budget", 0.05, 1, snap(best=0.051))
    assert crossed.holds is True and crossed.value == 0.051 and "0.051" in crossed.message
    assert rules.evaluate("budget", 0.05, 1, snap(best=None)).holds is True  # nothing certifiable: over any budget
    assert rules.evaluate("budget", 0.05, 1, snap(certified=False)).holds is None  # nothing yet: undecided


def test_rising_rules_read_the_least_squares_slope_of_the_last_n_steps():
    up = series("eps_hat_max", [0.10, 0.12, 0.11, 0.15, 0.16])
    v = rules.evaluate("eps_rising", 0.0, 5, snap(steps=up))
    # by hand: x̄ = 2, ȳ = 0.128, Σ(x−x̄)(y−ȳ) = 0.056 + 0.008 + 0 + 0.022 + 0.064 = 0.15, Σ(x−x̄)² = 10
    assert v.holds is True and v.value == pytest.approx(0.015)
    # an early spike outside the window does not count; inside it a falling series does not fire
    down = series("eps_hat_max", [0.9, 0.2, 0.19, 0.18, 0.17])
    assert rules.evaluate("eps_rising", 0.0, 4, snap(steps=down)).holds is False
    assert rules.evaluate("eps_rising", 0.0, 6, snap(steps=up)).holds is None  # 5 of the 6 steps needed
    flat_noise = series("abs_diff_mean", [1e-3, 2e-3, 1e-3, 2e-3])
    v = rules.evaluate("abs_diff_rising", 1e-3, 4, snap(steps=flat_noise))
    assert v.holds is False and v.value == pytest.approx(2e-4)  # rises a little, below the threshold
    # steps that lack the metric are skipped, not read as zero
    gappy = [{"step": 0, "abs_diff_mean": 1.0}, {"step": 1}, {"step": 2, "abs_diff_mean": 3.0}]
    assert rules.evaluate("abs_diff_rising", 0.5, 2, snap(steps=gappy)).value == pytest.approx(1.0)


def test_mask_rate_rule_means_the_last_n_steps():
    steps = series("mis_mask_rate", [0.5, 0.01, 0.03])
    assert rules.evaluate("mask_rate", 0.015, 2, snap(steps=steps)).value == pytest.approx(0.02)
    assert rules.evaluate("mask_rate", 0.025, 2, snap(steps=steps)).holds is False
    assert rules.evaluate("mask_rate", 0.025, 1, snap(steps=steps)).holds is True


# --- webhook URL checks and signatures -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "http://",
        "http://user:pw@example.com/",
        "http://exa mple.com/",
        "gopher://127.0.0.1:6379/",
        "http://example.com:99999/",
        "x" * 3000,
    ],
)
def test_webhook_urls_other_than_plain_http_or_https_are_refused(url):
    with pytest.raises(webhooks.UnsafeWebhookURL):
        webhooks.resolve(url, allow_private=True)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "10.1.2.3",
        "192.168.0.1",
        "172.16.5.4",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "[::1]",
        "[fd00::1]",
        "[::ffff:127.0.0.1]",
        "224.0.0.1",
    ],
)
def test_internal_addresses_are_refused_unless_the_setting_allows_them(host):
    with pytest.raises(webhooks.UnsafeWebhookURL, match="not a public address"):
        webhooks.resolve(f"http://{host}:8080/hook", allow_private=False)
    if host not in ("224.0.0.1",):
        assert webhooks.resolve(f"http://{host}:8080/hook", allow_private=True).port == 8080


def test_a_public_address_passes_and_the_delivery_connects_to_the_checked_address():
    target = webhooks.resolve("https://93.184.215.14/a?b=1", allow_private=False)
    assert (target.scheme, target.address, target.port, target.path) == ("https", "93.184.215.14", 443, "/a?b=1")


def test_post_refuses_an_internal_receiver_without_connecting():
    rx = Receiver()
    try:
        out = webhooks.post(rx.url, b"{}", secret="s", event_id="1", timeout=2, allow_private=False)
        assert not out.ok and not out.retry and out.error.startswith("refused:") and rx.requests == []
    finally:
        rx.close()


def test_signature_covers_timestamp_and_body():
    body, ts = b'{"a":1}', 1_700_000_000
    sig = webhooks.signature("k", ts, body)
    assert webhooks.verify("k", str(ts), body, sig, now=ts + 10)
    assert not webhooks.verify("k", str(ts), body + b" ", sig, now=ts + 10)  # body changed
    assert not webhooks.verify("k", str(ts + 1), body, sig, now=ts + 10)  # timestamp changed
    assert not webhooks.verify("other", str(ts), body, sig, now=ts + 10)  # another rule's secret
    assert not webhooks.verify("k", str(ts), body, sig, now=ts + 301)  # replayed late


# --- evaluation: once per crossing -----------------------------------------------------------------------------------
@pytest.fixture
def run(project):
    return Run.objects.create(project=project, name="grpo-live")


def test_a_rule_fires_once_per_crossing_and_re_arms(project, run, settings, django_capture_on_commit_callbacks):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    rule = services.create_rule(
        project=project,
        created_by="t",
        data={"name": "budget", "kind": "budget", "threshold": 0.05, "webhook_url": "http://127.0.0.1:9/hook"},
    )
    quiet = services.create_rule(
        project=project, created_by="t", data={"name": "page only", "kind": "budget", "threshold": 0.05}
    )
    with pytest.MonkeyPatch.context() as mp, django_capture_on_commit_callbacks(execute=True):
        sent = []
        mp.setattr(services, "enqueue_delivery", lambda pk, countdown=0: sent.append(pk) or True)
        assert services.evaluate_run(run, snap(best=0.01)) == []
        fired = services.evaluate_run(run, snap(best=0.2))
        assert [(e.rule_id, e.kind) for e in fired] == [(rule.pk, "fired"), (quiet.pk, "fired")]
        assert services.evaluate_run(run, snap(best=0.3)) == []  # still above: no second event
        assert [e.kind for e in services.evaluate_run(run, snap(best=0.04))] == ["resolved", "resolved"]
        assert [e.kind for e in services.evaluate_run(run, snap(best=0.5))] == ["fired", "fired"]
        assert services.evaluate_run(run, snap(certified=False)) == []  # undecidable: state kept
    state = AlertState.objects.get(rule=rule, run=run)
    assert state.firing and state.fired_count == 2 and state.value == 0.5
    # a webhook per fired event of the rule with a URL, none for re-arming or for the page-only rule
    assert WebhookDelivery.objects.count() == 2 == len(sent)
    assert set(WebhookDelivery.objects.values_list("event__rule", flat=True)) == {rule.pk}
    body = json.loads(WebhookDelivery.objects.first().payload)
    assert body["type"] == "alert.fired" and body["rule"]["id"] == rule.pk and body["run"]["name"] == "grpo-live"
    assert body["value"] == 0.5 and body["project"] == project.slug
    assert AlertEvent.objects.filter(rule=quiet).count() == 3


def test_delivery_retries_with_backoff_then_delivers_a_verifiable_signed_payload(project, run, settings):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    settings.ALERT_WEBHOOK_BACKOFF_SECONDS = 2
    rx = Receiver(statuses=[503, 200])
    try:
        rule = services.create_rule(
            project=project,
            created_by="t",
            data={"name": "budget", "kind": "budget", "threshold": 0.05, "webhook_url": rx.url},
        )
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(services, "enqueue_delivery", lambda pk, countdown=0: True)
            (event,) = services.evaluate_run(run, snap(best=0.2))
        delivery = WebhookDelivery.objects.get(event=event)
        assert services.attempt(delivery.pk) == ("retry", 2.0)
        delivery.refresh_from_db()
        assert delivery.state == "pending" and delivery.last_status == 503 and delivery.next_attempt_at is not None
        assert services.attempt(delivery.pk) == ("delivered", None)
        assert services.attempt(delivery.pk) == ("skipped", None)  # a redelivered task sends nothing again
        delivery.refresh_from_db()
        assert delivery.state == "delivered" and delivery.attempts == 2 and delivery.last_status == 200
        assert len(rx.requests) == 2 and rx.requests[0]["body"] == rx.requests[1]["body"]  # the same bytes
        req = rx.requests[1]
        assert req["path"] == "/hook?team=ml"
        h = {k.lower(): v for k, v in req["headers"].items()}
        assert webhooks.verify(rule.secret, h["x-audit-portal-timestamp"], req["body"], h["x-audit-portal-signature"])
        assert h["x-audit-portal-event"] == str(event.pk)
        assert json.loads(req["body"])["value"] == 0.2
    finally:
        rx.close()
    assert services.backoff(1) == 2 and services.backoff(3) == 8 and services.backoff(30) == 900


def test_delivery_gives_up_on_a_4xx_and_after_the_last_attempt(project, run, settings):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    settings.ALERT_WEBHOOK_MAX_ATTEMPTS = 2
    rx = Receiver(statuses=[410, 500])
    try:
        services.create_rule(
            project=project,
            created_by="t",
            data={"name": "b", "kind": "budget", "threshold": 0.05, "webhook_url": rx.url},
        )
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(services, "enqueue_delivery", lambda pk, countdown=0: True)
            (event,) = services.evaluate_run(run, snap(best=0.2))
            services.evaluate_run(run, snap(best=0.0))
            (again,) = [e for e in services.evaluate_run(run, snap(best=0.2)) if e.kind == "fired"]
        first, second = (WebhookDelivery.objects.get(event=e) for e in (event, again))
        assert services.attempt(first.pk) == ("failed", None)  # 410: retrying cannot help
        assert services.attempt(second.pk)[0] == "retry" and services.attempt(second.pk) == ("failed", None)
        second.refresh_from_db()
        assert second.attempts == 2 and second.last_error == "HTTP 500" and second.finished_at is not None
    finally:
        rx.close()


def test_a_timeout_is_bounded_and_retried(project, run, settings):
    import socket

    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    settings.ALERT_WEBHOOK_TIMEOUT_SECONDS = 0.5
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    try:
        t0 = time.monotonic()
        out = webhooks.post(
            f"http://127.0.0.1:{silent.getsockname()[1]}/",
            b"{}",
            secret="s",
            event_id="1",
            timeout=0.5,
            allow_private=True,
        )
        assert time.monotonic() - t0 < 5 and not out.ok and out.retry and "timed out" in out.error
    finally:
        silent.close()


# --- API and page ----------------------------------------------------------------------------------------------------
def test_api_creates_rules_reports_state_per_run_and_refuses_what_it_must(
    project, run, api, other_project, owner, settings
):
    url = f"/api/v1/projects/{project.slug}/alert-rules/"
    r = api.post(url, {"name": "over budget", "kind": "budget", "threshold": 0.05}, format="json")
    assert r.status_code == 201 and len(r.json()["secret"]) >= 40 and r.json()["states"] == []
    rule_id = r.json()["id"]
    assert "secret" not in api.get(f"/api/v1/alert-rules/{rule_id}/").json()  # shown once
    bad = api.post(url, {"name": "x", "kind": "budget", "threshold": "lots"}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_alert_rule"
    assert bad.json()["error"]["detail"]["field"] == "threshold"
    assert (
        api.post(url, {"name": "x", "kind": "eps_rising", "threshold": 0, "window": 1}, format="json").json()["error"][
            "detail"
        ]["field"]
        == "window"
    )
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = False
    ssrf = api.post(
        url, {"name": "x", "kind": "budget", "threshold": 1, "webhook_url": "http://169.254.169.254/"}, format="json"
    )
    assert ssrf.status_code == 400 and ssrf.json()["error"]["detail"]["field"] == "webhook_url"
    assert "not a public address" in ssrf.json()["error"]["message"]
    # CI reads the state per run
    assert api.get(f"/api/v1/runs/{run.pk}/alerts/").json()["rules"][0]["state"] == "not_evaluated"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(services, "enqueue_delivery", lambda pk, countdown=0: True)
        services.evaluate_run(run, snap(best=0.2))
    got = api.get(f"/api/v1/runs/{run.pk}/alerts/").json()
    assert got["firing"] is True and got["rules"][0]["state"] == "firing" and got["rules"][0]["value"] == 0.2
    detail = api.get(f"/api/v1/alert-rules/{rule_id}/").json()
    assert detail["firing_runs"] == [run.pk] and detail["states"][0]["state"] == "firing"
    # a read-only key reads but cannot create; another project's rules and runs are not found
    reader = APIClient()
    reader.credentials(
        HTTP_AUTHORIZATION="Bearer "
        + issue_api_key(project=project, name="ro", scopes=["read"], created_by=owner).token
    )
    assert reader.get(url).status_code == 200
    assert reader.post(url, {"name": "x", "kind": "budget", "threshold": 1}, format="json").status_code == 403
    assert reader.delete(f"/api/v1/alert-rules/{rule_id}/").status_code == 403
    assert api.get(f"/api/v1/projects/{other_project.slug}/alert-rules/").status_code == 404
    foreign = Run.objects.create(project=other_project, name="theirs")
    assert api.get(f"/api/v1/runs/{foreign.pk}/alerts/").status_code == 404
    assert api.delete(f"/api/v1/alert-rules/{rule_id}/").status_code == 204


def test_schema_documents_the_alert_endpoints(client):
    schema = client.get("/api/schema/?format=json").json()
    assert {"/api/v1/projects/{slug}/alert-rules/", "/api/v1/alert-rules/{id}/", "/api/v1/runs/{id}/alerts/"} <= set(
        schema["paths"]
    )
    assert "RunAlerts" in schema["components"]["schemas"]


def test_page_adds_a_rule_shows_its_secret_once_and_lists_events_and_deliveries(
    project, run, owner, client, member_of, settings
):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    client.force_login(owner)
    page = f"/p/{project.slug}/alerts/"
    r = client.post(
        page,
        {
            "name": "drift",
            "kind": "budget",
            "threshold": "0.05",
            "window": "1",
            "webhook_url": "http://127.0.0.1:9/hook",
        },
        follow=True,
    )
    html = r.content.decode()
    rule = project.alert_rules.get()
    assert r.redirect_chain == [(page, 302)]  # POST-redirect-GET: reloading the page adds no second rule
    assert r.status_code == 200 and 'id="rule-secret"' in html and rule.secret in html
    assert rule.secret not in client.get(page).content.decode()  # shown once
    assert project.alert_rules.count() == 1
    bad = client.post(page, {"name": "x", "kind": "budget", "threshold": "1", "webhook_url": "ftp://x/"})
    assert bad.status_code == 400 and "only http:// and https://" in bad.content.decode()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(services, "enqueue_delivery", lambda pk, countdown=0: True)
        services.evaluate_run(run, snap(best=0.2))
    html = client.get(page).content.decode()
    assert "firing" in html and "B* = 0.2 &gt; budget 0.05" in html and "data-delivery-id" in html
    run_page = client.get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()  # a run that streams nothing too
    assert f'data-firing-rule="{rule.pk}"' in run_page and "Firing: drift" in run_page
    viewer = member_of(project, role=Role.VIEWER)
    client.force_login(viewer)
    html = client.get(page).content.decode()
    assert 'id="rule-form"' not in html and "firing" in html
    assert client.post(page, {"name": "v", "kind": "budget", "threshold": "1"}).status_code == 302
    assert project.alert_rules.count() == 1
    stranger = get_user_model().objects.create_user("mallory", password="pw-mallory-1")
    client.force_login(stranger)
    assert client.get(page).status_code == 404


def test_the_sweep_resends_deliveries_whose_task_was_lost_once_per_period(project, run, settings):
    from datetime import timedelta

    from django.utils import timezone

    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    services.create_rule(
        project=project,
        created_by="t",
        data={"name": "b", "kind": "budget", "threshold": 0.05, "webhook_url": "http://127.0.0.1:9/hook"},
    )
    sent = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(services, "enqueue_delivery", lambda pk, countdown=0: sent.append(pk) or True)
        (event,) = services.evaluate_run(run, snap(best=0.2))
        delivery = WebhookDelivery.objects.get(event=event)
        assert services.resend_stale() == []  # just created: its task may still be on its way
        later = timezone.now() + timedelta(seconds=301)
        assert services.resend_stale(now=later) == [delivery.pk]
        assert services.resend_stale(now=later + timedelta(seconds=60)) == []  # resent once per period
        assert services.resend_stale(now=later + timedelta(seconds=302)) == [delivery.pk]
        WebhookDelivery.objects.filter(pk=delivery.pk).update(state="delivered")
        assert services.resend_stale(now=later + timedelta(seconds=1000)) == []
    assert sent == [delivery.pk, delivery.pk]


def test_the_consistency_check_reports_an_overdue_delivery_and_a_firing_state_without_its_event(project, run, settings):
    from datetime import timedelta

    from django.utils import timezone

    from audit_portal.jobs.consistency import check

    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    rule = services.create_rule(
        project=project,
        created_by="t",
        data={"name": "b", "kind": "budget", "threshold": 0.05, "webhook_url": "http://127.0.0.1:9/h"},
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(services, "enqueue_delivery", lambda pk, countdown=0: True)
        (event,) = services.evaluate_run(run, snap(best=0.2))
    mine = lambda: [p for p in check(rehash=False, project=project).problems if "webhook" in p or "alert rule" in p]
    assert mine() == []  # just raised: its task has time
    WebhookDelivery.objects.filter(event=event).update(created_at=timezone.now() - timedelta(hours=1))
    AlertEvent.objects.filter(pk=event.pk).update(kind="resolved")  # as if the fired event were lost
    problems = mine()
    assert any("is pending, due since" in p for p in problems), problems
    assert any(f"alert rule {rule.pk} is firing for run {run.pk} without a fired event" in p for p in problems)


def test_a_project_has_a_bounded_number_of_rules(project, api, monkeypatch):
    monkeypatch.setattr(services, "MAX_RULES_PER_PROJECT", 2)
    url = f"/api/v1/projects/{project.slug}/alert-rules/"
    for i in range(2):
        assert api.post(url, {"name": f"r{i}", "kind": "budget", "threshold": 1}, format="json").status_code == 201
    r = api.post(url, {"name": "r3", "kind": "budget", "threshold": 1}, format="json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_alert_rules"
    assert project.alert_rules.count() == 2


def test_an_older_snapshot_evaluated_last_does_not_undo_a_newer_answer(project, run):
    from datetime import timedelta

    from django.utils import timezone

    services.create_rule(project=project, created_by="t", data={"name": "b", "kind": "budget", "threshold": 0.05})
    t1 = timezone.now()
    t2 = t1 + timedelta(seconds=1)
    # two segments merged by two workers: the newer view (over budget) is evaluated first, the older one (under) last
    assert [e.kind for e in services.evaluate_run(run, {**snap(best=0.2), "as_of": t2})] == ["fired"]
    assert services.evaluate_run(run, {**snap(best=0.01), "as_of": t1}) == []
    state = AlertState.objects.get(run=run)
    assert state.firing and state.value == 0.2 and state.as_of == t2
    assert [e.kind for e in services.evaluate_run(run, {**snap(best=0.01), "as_of": t2 + timedelta(seconds=1)})] == [
        "resolved"
    ]  # newer data re-arms it


def test_the_webhook_payload_carries_the_runs_verdict(project, run, settings):
    from audit_portal.certificates.models import RunCertificate
    from audit_portal.runs.models import Upload
    from workers.certify.verdict import run_verdict

    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    rule = services.create_rule(
        project=project,
        created_by="t",
        data={"name": "budget", "kind": "budget", "threshold": 0.05, "webhook_url": "http://127.0.0.1:9/hook"},
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(services, "enqueue_delivery", lambda pk, countdown=0: True)
        (event,) = services.evaluate_run(run, snap(best=0.2))
    assert json.loads(services.payload(event))["run"]["verdict"] is None  # no certificate yet: no verdict claimed
    upload = Upload.objects.create(project=project, run=run, original_name="r.jsonl", sha256="a" * 64, size_bytes=1)
    summary = {"sequences": 4, "sequences_certified": 4, "eps_hat": 0.01, "T_ref": 64}
    verdict = run_verdict(summary, {"best": 0.2}, {})
    RunCertificate.objects.create(
        project=project,
        run=run,
        upload=upload,
        state="complete",
        summary=summary,
        bounds={"best": 0.2},
        verdict=verdict.code,
        verdict_detail=verdict.as_dict(),
    )
    body = json.loads(services.payload(event))
    assert body["run"]["verdict"] == {"code": "over_budget", "label": verdict.label, "sentence": verdict.sentence}
    assert rule.pk == body["rule"]["id"]


def test_a_certification_job_reads_as_the_runs_verdict():
    from audit_portal.jobs.outcomes import outcome

    got = outcome("certify_upload", "succeeded", {"verdict": "vacuous", "data_errors": 0})
    assert got == {"text": "finished: not certified: the bound says nothing", "tone": "duplicate"}
    assert outcome("certify_upload", "succeeded", {"verdict": "certified"})["tone"] == "valid"
    assert outcome("certify_upload", "succeeded", {"data_errors": 3})["tone"] == "duplicate"  # older results
