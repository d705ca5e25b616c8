"""Changing an alert rule (PATCH /api/v1/alert-rules/<id>/ and the page's forms): the fields sent change, the others
stay; bad values are refused naming the field and leave the rule as it was; a new condition or a rule enabled again
starts it afresh — its states cleared and its runs evaluated again, so it fires once where the new condition holds."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from audit_portal import task_names
from audit_portal.accounts.models import Role
from audit_portal.accounts.services import issue_api_key
from audit_portal.alerts import selectors, services
from audit_portal.alerts.models import AlertEvent, AlertRule, AlertState
from audit_portal.celery import app as celery_app
from audit_portal.runs.models import Run
from pipelines import evaluate_alert_rules


def snap(best):
    return {"certified": True, "best_bound": best, "steps": []}


@pytest.fixture
def run(project):
    return Run.objects.create(project=project, name="grpo-edit")


@pytest.fixture
def firing_rule(project, run):
    rule = services.create_rule(
        project=project, created_by="t", data={"name": "B*", "kind": "budget", "threshold": 0.05}
    )
    services.evaluate_run(run, snap(0.2))
    assert AlertState.objects.get(rule=rule, run=run).firing
    return rule


@pytest.fixture
def sent(monkeypatch):
    """The tasks the portal queues (the evaluation of a changed rule's runs)."""
    out = []
    monkeypatch.setattr(celery_app, "send_task", lambda name, kwargs=None, **options: out.append((name, kwargs)))
    return out


@pytest.fixture
def latest_data(monkeypatch):
    """What the evaluation task reads for a run without a live view: its newest certificate, as B* here."""
    value = {"best": 0.2}
    monkeypatch.setattr(selectors, "run_snapshot", lambda run: snap(value["best"]))
    return value


def patch(api, rule, body):
    return api.patch(f"/api/v1/alert-rules/{rule.pk}/", body, format="json")


def test_a_new_threshold_starts_the_rule_afresh_on_its_runs(
    api, firing_rule, run, sent, latest_data, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        r = patch(api, firing_rule, {"threshold": 0.5})
    assert r.status_code == 200, r.content
    assert r.json()["threshold"] == 0.5 and r.json()["states"] == [] and r.json()["name"] == "B*"
    assert sent == [(task_names.EVALUATE_ALERT_RULES, {"run_ids": [run.pk]})]
    evaluate_alert_rules(**sent[0][1])
    state = AlertState.objects.get(rule=firing_rule, run=run)
    assert not state.firing and state.value == 0.2  # B* 0.2 is within the new budget: armed, nothing raised
    assert AlertEvent.objects.filter(rule=firing_rule).count() == 1  # the earlier event stays in the log

    with django_capture_on_commit_callbacks(execute=True):
        assert patch(api, firing_rule, {"threshold": 0.1}).status_code == 200
    evaluate_alert_rules(**sent[1][1])
    assert AlertState.objects.get(rule=firing_rule, run=run).firing  # the new condition holds: fired once
    assert list(AlertEvent.objects.filter(rule=firing_rule).values_list("kind", flat=True)) == ["fired", "fired"]
    evaluate_alert_rules(**sent[1][1])  # a redelivered evaluation raises nothing more
    assert AlertEvent.objects.filter(rule=firing_rule).count() == 2


def test_a_new_name_or_a_disabled_rule_keeps_its_states(
    api, firing_rule, run, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        assert patch(api, firing_rule, {"name": "renamed"}).json()["firing_runs"] == [run.pk]
        disabled = patch(api, firing_rule, {"enabled": False})
    assert disabled.status_code == 200 and disabled.json()["enabled"] is False and sent == []
    assert AlertState.objects.get(rule=firing_rule, run=run).firing  # kept, but a disabled rule is not shown firing
    gate = api.get(f"/api/v1/runs/{run.pk}/alerts/").json()
    assert gate["firing"] is False and gate["rules"] == []
    with django_capture_on_commit_callbacks(execute=True):
        assert patch(api, firing_rule, {"enabled": True}).json()["states"] == []  # enabled again: afresh
    assert sent == [(task_names.EVALUATE_ALERT_RULES, {"run_ids": [run.pk]})]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"threshold": "lots"}, "threshold"),
        ({"threshold": "inf"}, "threshold"),
        ({"kind": "vibes"}, "kind"),
        ({"kind": "eps_rising", "window": 1}, "window"),
        ({"name": ""}, "name"),
        ({"secret": "mine"}, "secret"),
        ({"project": 2}, "project"),
        ({"webhook_url": "http://169.254.169.254/"}, "webhook_url"),
        ({"window": None}, "window"),
        ({"enabled": "maybe"}, "enabled"),
        ({"enabled": None}, "enabled"),
    ],
)
def test_a_bad_change_is_refused_naming_the_field_and_changes_nothing(api, firing_rule, run, body, field, settings):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = False
    before = AlertRule.objects.filter(pk=firing_rule.pk).values().get()
    r = api.patch(f"/api/v1/alert-rules/{firing_rule.pk}/", body, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["code"] == "invalid_alert_rule" and r.json()["error"]["detail"]["field"] == field
    assert AlertRule.objects.filter(pk=firing_rule.pk).values().get() == before
    assert AlertState.objects.get(rule=firing_rule, run=run).firing


def test_only_the_submit_role_changes_a_rule_and_only_in_its_project(project, other_project, firing_rule, owner):
    reader = APIClient()
    reader.credentials(
        HTTP_AUTHORIZATION="Bearer "
        + issue_api_key(project=project, name="ro", scopes=["read"], created_by=owner).token
    )
    assert patch(reader, firing_rule, {"threshold": 9}).status_code == 403
    stranger = get_user_model().objects.get(username="sam")  # other_project's owner
    outsider = APIClient()
    outsider.credentials(
        HTTP_AUTHORIZATION="Bearer "
        + issue_api_key(project=other_project, name="x", scopes=["read", "submit"], created_by=stranger).token
    )
    assert patch(outsider, firing_rule, {"threshold": 9}).status_code == 404
    assert AlertRule.objects.get(pk=firing_rule.pk).threshold == 0.05


def test_the_schema_documents_the_change(client):
    operation = client.get("/api/schema/?format=json").json()["paths"]["/api/v1/alert-rules/{id}/"]["patch"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert body.startswith("PatchedAlertRuleChange") or body == "AlertRuleChange"


def test_the_page_edits_disables_and_refuses_a_viewer(
    project, firing_rule, run, owner, client, member_of, sent, django_capture_on_commit_callbacks
):
    client.force_login(owner)
    page, edit = f"/p/{project.slug}/alerts/", f"/p/{project.slug}/alerts/{firing_rule.pk}/edit/"
    html = client.get(page).content.decode()
    assert f'action="{edit}"' in html and 'value="0.05"' in html
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post(
            edit,
            {"name": "B* budget", "kind": "budget", "threshold": "0.3", "window": "5", "webhook_url": ""},
            follow=True,
        )
    assert "Alert rule “B* budget” saved." in r.content.decode()
    rule = AlertRule.objects.get(pk=firing_rule.pk)
    assert (rule.name, rule.threshold) == ("B* budget", 0.3) and not rule.states.exists() and len(sent) == 1
    bad = client.post(edit, {"threshold": "-"}, follow=True).content.decode()
    assert "not changed: threshold: a number" in bad and AlertRule.objects.get(pk=rule.pk).threshold == 0.3
    services.evaluate_run(run, snap(0.9))  # firing at the new budget ...
    client.post(edit, {"enabled": "false"})
    html = client.get(page).content.decode()
    assert not AlertRule.objects.get(pk=rule.pk).enabled and "Enable</button>" in html
    assert "not evaluated while disabled" in html and ">firing<" not in html  # ... not shown firing once disabled
    client.force_login(member_of(project, role=Role.VIEWER))
    assert f'action="{edit}"' not in client.get(page).content.decode()
    assert client.post(edit, {"enabled": "true"}).status_code == 302
    assert not AlertRule.objects.get(pk=rule.pk).enabled


def test_a_new_secret_is_shown_once_and_replaces_the_old(project, api, client, owner, member_of, settings):
    settings.ALERT_WEBHOOK_ALLOW_PRIVATE = True
    rule = services.create_rule(
        project=project,
        created_by="t",
        data={"name": "hooked", "kind": "budget", "threshold": 0.05, "webhook_url": "http://127.0.0.1:9/hook"},
    )
    old = rule.secret
    r = api.post(f"/api/v1/alert-rules/{rule.pk}/secret/")
    assert r.status_code == 200 and len(r.json()["secret"]) >= 40 and r.json()["secret"] != old
    assert AlertRule.objects.get(pk=rule.pk).secret == r.json()["secret"]
    assert "secret" not in api.get(f"/api/v1/alert-rules/{rule.pk}/").json()
    client.force_login(owner)
    page = client.post(f"/p/{project.slug}/alerts/{rule.pk}/secret/", follow=True)
    newest = AlertRule.objects.get(pk=rule.pk).secret
    assert page.redirect_chain == [(f"/p/{project.slug}/alerts/", 302)]  # POST-redirect-GET
    assert page.status_code == 200 and 'id="rule-rotated"' in page.content.decode()
    assert newest != r.json()["secret"] and newest in page.content.decode()
    assert newest not in client.get(f"/p/{project.slug}/alerts/").content.decode()  # shown once
    client.force_login(member_of(project, role=Role.VIEWER))
    assert client.post(f"/p/{project.slug}/alerts/{rule.pk}/secret/").status_code == 302
    assert AlertRule.objects.get(pk=rule.pk).secret == newest
