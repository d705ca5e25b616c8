"""Writes for alerts: rules (checked, secret generated), evaluation of a run (one event per crossing) and the
webhook deliveries' bookkeeping. The POST itself is webhooks.py, run by the Celery task pipelines/alerts.py."""

from __future__ import annotations

import json
import logging
import math
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit_portal import task_names
from audit_portal.alerts import events, rules, webhooks
from audit_portal.alerts.models import AlertEvent, AlertRule, AlertState, WebhookDelivery
from audit_portal.certificates import selectors as certificate_selectors
from audit_portal.core.errors import PortalError

log = logging.getLogger(__name__)
MAX_RULES_PER_PROJECT = 50  # every rule can post to a URL on every crossing of every run: the fan-out is bounded


class InvalidAlertRule(PortalError):
    default_code = "invalid_alert_rule"


def _bad(field: str, message: str):
    return InvalidAlertRule(f"{field}: {message}", extra={"field": field})


def check_rule(data, *, check_url: bool = True) -> dict:
    """The fields of a new rule, checked (a 400 ``invalid_alert_rule`` naming the field otherwise). ``check_url``
    False: the webhook URL is one already checked (each delivery checks its address again before connecting)."""
    if not isinstance(data, dict):
        raise _bad("body", "send a JSON object")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise _bad("name", "1 to 100 characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):  # NUL cannot be stored; the rest would garble pages
        raise _bad("name", "no control characters")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in rules.KINDS:  # a list or an object is no kind (nor hashable)
        raise _bad("kind", f"one of {', '.join(rules.KINDS)}")
    try:
        threshold = float(data.get("threshold"))
    except (TypeError, ValueError):
        raise _bad("threshold", "a number") from None
    if not math.isfinite(threshold) or isinstance(data.get("threshold"), bool):
        raise _bad("threshold", "a finite number")
    window = data.get("window")
    window = 5 if window in (None, "") else window
    try:
        window = int(window)
    except (TypeError, ValueError):
        raise _bad("window", "a whole number of steps") from None
    low = 2 if kind in (rules.EPS_RISING, rules.ABS_DIFF_RISING) else 1
    if not low <= window <= rules.MAX_WINDOW:
        raise _bad("window", f"from {low} to {rules.MAX_WINDOW} steps")
    url = data.get("webhook_url")
    if url is not None and not isinstance(url, str):
        raise _bad("webhook_url", "a URL as a string, or empty for none")
    url = (url or "").strip()
    if url and check_url:
        try:
            webhooks.resolve(url, allow_private=settings.ALERT_WEBHOOK_ALLOW_PRIVATE)
        except webhooks.UnsafeWebhookURL as exc:
            raise _bad("webhook_url", str(exc)) from None
    enabled = data.get("enabled", True)
    if enabled in (True, "true", "1", "on"):
        enabled = True
    elif enabled in (False, "false", "0", "off", ""):  # "": an unticked box
        enabled = False
    else:
        raise _bad("enabled", "true or false")
    return {
        "name": name.strip(),
        "kind": kind,
        "threshold": threshold,
        "window": window,
        "webhook_url": url,
        "enabled": enabled,
    }


def create_rule(*, project, data, created_by: str) -> AlertRule:
    """A new rule with a fresh signing secret (returned on the object once: ``rule.secret``)."""
    fields = check_rule(data)
    if AlertRule.objects.filter(project=project).count() >= MAX_RULES_PER_PROJECT:
        raise InvalidAlertRule(
            f"a project has at most {MAX_RULES_PER_PROJECT} alert rules; delete one first", code="too_many_alert_rules"
        )
    return AlertRule.objects.create(
        project=project, secret=secrets.token_urlsafe(32), created_by=created_by[:150], **fields
    )


EDITABLE = ("name", "kind", "threshold", "window", "webhook_url", "enabled")
CONDITION = ("kind", "threshold", "window")


def update_rule(rule: AlertRule, data) -> AlertRule:
    """Change some of a rule's fields (the rest keep their values; the signing secret never changes), checked as a new
    rule is. A changed condition (kind, threshold, N) or a rule enabled again starts the rule afresh: its states per
    run are cleared and those runs are evaluated again on their latest data, so the rule fires once where the new
    condition holds. Earlier events stay in the log as they were raised. A renamed rule, a new webhook or a disabled
    rule keeps its states (a disabled rule is not evaluated, and a firing state of it is not shown as firing)."""
    if not isinstance(data, dict):
        raise _bad("body", "send a JSON object")
    for name, value in data.items():
        if name not in EDITABLE:
            raise _bad(str(name)[:100], f"not a field that can be changed (these can: {', '.join(EDITABLE)})")
        if value is None:
            raise _bad(name, "null is not a value here; leave the field out to keep it")
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().get(pk=rule.pk)
        before = {f: getattr(rule, f) for f in EDITABLE}
        fields = check_rule(
            {**before, **data}, check_url=data.get("webhook_url", before["webhook_url"]) != before["webhook_url"]
        )
        for name, value in fields.items():
            setattr(rule, name, value)
        rule.save(update_fields=list(EDITABLE))
        restart = fields["enabled"] and (not before["enabled"] or any(fields[f] != before[f] for f in CONDITION))
        if restart:
            runs = sorted(set(rule.states.values_list("run_id", flat=True)))
            rule.states.all().delete()
            if runs:
                transaction.on_commit(lambda: _evaluate_again(runs))
    return rule


def rotate_secret(rule: AlertRule) -> AlertRule:
    """A new signing secret for the rule (on the returned object once: ``rule.secret``); the old one signs nothing
    more. Deliveries still being retried are signed with the new one at their next attempt."""
    rule.secret = secrets.token_urlsafe(32)
    rule.save(update_fields=["secret"])
    return rule


def _evaluate_again(run_ids: list[int]) -> None:
    failure = send_task(task_names.EVALUATE_ALERT_RULES, {"run_ids": run_ids})
    if failure is not None:  # the states read "not evaluated" until the runs' next data
        log.error("could not queue the evaluation of runs %s: %s", run_ids, failure)


def send_task(name: str, kwargs: dict, countdown: float = 0) -> Exception | None:
    """Queue an alerts task by name on the ``cpu`` queue; None, or the broker's refusal (the caller says what waits
    for it). Keyword arguments only: jobs/signals.py reads a positional int of a failed task as a Job id."""
    from audit_portal.celery import app as celery_app

    try:
        celery_app.send_task(name, kwargs=kwargs, queue="cpu", countdown=countdown, retry=False)
    except Exception as exc:  # noqa: BLE001 - kombu raises several connection error types
        return exc
    return None


def delete_rule(rule: AlertRule) -> None:
    rule.delete()


# --- evaluation ------------------------------------------------------------------------------------------------------
def evaluate_run(run, snapshot: dict) -> list[AlertEvent]:
    """Every enabled rule of the run's project against ``snapshot`` (rules.py). A rule whose answer flips from no to
    yes raises a ``fired`` event (and a webhook delivery when it has a URL); yes to no re-arms it (a ``resolved``
    event, no webhook). Unchanged answers raise nothing, so a rule fires once per crossing however often a run is
    evaluated. Row locks make two evaluations of one run at once (two segments certified together) raise one event,
    and ``snapshot["as_of"]`` (when its data was current) keeps an older snapshot evaluated last from undoing a newer
    one's answer."""
    raised: list[AlertEvent] = []
    now, as_of = timezone.now(), snapshot.get("as_of")
    with transaction.atomic():
        for rule in AlertRule.objects.filter(project_id=run.project_id, enabled=True).order_by("pk"):
            verdict = rules.evaluate(rule.kind, rule.threshold, rule.window, snapshot)
            _, created = AlertState.objects.get_or_create(rule=rule, run=run)
            state = AlertState.objects.select_for_update().get(rule=rule, run=run)
            if as_of is not None and state.as_of is not None and as_of < state.as_of:
                continue  # stale: a newer snapshot of this run was evaluated already
            state.evaluated_at, state.as_of = now, as_of or state.as_of
            if verdict.holds is not None or created:  # an undecidable moment keeps the last decided value
                state.value, state.message = verdict.value, verdict.message[:500]
            if verdict.holds is not None and verdict.holds != state.firing:
                state.firing, state.changed_at = verdict.holds, now
                state.fired_count += int(verdict.holds)
                event = AlertEvent.objects.create(
                    rule=rule,
                    run=run,
                    value=verdict.value,
                    message=state.message,
                    kind=AlertEvent.FIRED if verdict.holds else AlertEvent.RESOLVED,
                )
                if verdict.holds and rule.webhook_url:
                    delivery = WebhookDelivery.objects.create(
                        event=event, url=rule.webhook_url, payload=payload(event).decode()
                    )
                    transaction.on_commit(lambda pk=delivery.pk: enqueue_delivery(pk))
                raised.append(event)
            state.save()
        for event in raised:
            transaction.on_commit(lambda e=event: events.publish_alert(e))
    return raised


def _verdict_of(run) -> dict | None:
    verdict = certificate_selectors.run_verdict(run)
    return (
        None
        if verdict is None
        else {"code": verdict["code"], "label": verdict["label"], "sentence": verdict["sentence"][:500]}
    )


def payload(event: AlertEvent) -> bytes:
    """The webhook body: small by construction (every text field is cut to its column's limit) and refused above
    ALERT_WEBHOOK_MAX_PAYLOAD_BYTES, so a receiver never gets an unbounded body."""
    rule, run = event.rule, event.run
    body = {
        "type": f"alert.{event.kind}",
        "event_id": event.pk,
        "created_at": event.created_at.isoformat(),
        "project": rule.project.slug,
        "rule": {
            "id": rule.pk,
            "name": rule.name,
            "kind": rule.kind,
            "threshold": rule.threshold,
            "window": rule.window,
        },
        "run": {
            "id": run.pk,
            "name": run.name,
            "page": f"/p/{rule.project.slug}/runs/{run.pk}/",
            "verdict": _verdict_of(run),
        },
        "value": event.value if event.value is None or math.isfinite(event.value) else None,
        "message": event.message,
    }
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    if len(data) > settings.ALERT_WEBHOOK_MAX_PAYLOAD_BYTES:
        raise ValueError(f"webhook payload of {len(data)} bytes exceeds ALERT_WEBHOOK_MAX_PAYLOAD_BYTES")
    return data


# --- deliveries ------------------------------------------------------------------------------------------------------
def enqueue_delivery(delivery_id: int, countdown: float = 0) -> bool:
    """Send the delivery task; False when the broker refused it (the row stays pending, with the reason on the alerts
    page, and the sweep sends it again)."""
    failure = send_task(task_names.DELIVER_ALERT_WEBHOOK, {"delivery_id": delivery_id}, countdown)
    if failure is not None:
        log.error("could not enqueue webhook delivery %s: %s", delivery_id, failure)
        WebhookDelivery.objects.filter(pk=delivery_id).update(last_error=f"queue unreachable: {failure}"[:500])
    return failure is None


def resend_stale(now=None, after_seconds: float = 300.0) -> list[int]:
    """Pending deliveries whose task was lost (the broker was down when it was sent, or restarted without its
    messages) sent again by the periodic sweep: none attempted and created, or due, more than ``after_seconds`` ago.
    Each is marked due now, so it is resent at most once per ``after_seconds``; a task that was only late meets a
    delivery already done and sends nothing, or posts once more (receivers de-duplicate by X-Audit-Portal-Event)."""
    now = now or timezone.now()
    cut = now - timedelta(seconds=after_seconds)
    stale = WebhookDelivery.objects.filter(state=WebhookDelivery.PENDING).filter(
        Q(next_attempt_at__lt=cut) | Q(next_attempt_at__isnull=True, created_at__lt=cut)
    )
    resent = []
    for pk in stale.order_by("pk").values_list("pk", flat=True)[:500]:
        WebhookDelivery.objects.filter(pk=pk).update(next_attempt_at=now)
        if enqueue_delivery(pk):
            resent.append(pk)
    return resent


def backoff(attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``: doubling from ALERT_WEBHOOK_BACKOFF_SECONDS, capped at 15 minutes."""
    return min(settings.ALERT_WEBHOOK_BACKOFF_SECONDS * 2 ** max(0, attempt - 1), 900.0)


def attempt(delivery_id: int) -> tuple[str, float | None]:
    """One delivery attempt, from the task: ``("delivered"|"failed"|"skipped", None)`` or ``("retry", seconds)``."""
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update().filter(pk=delivery_id).select_related("event__rule").first()
        )
        if delivery is None or delivery.state != WebhookDelivery.PENDING:
            return "skipped", None  # a redelivered task after the outcome was stored
        delivery.attempts += 1
        delivery.last_attempt_at = timezone.now()
        delivery.save(update_fields=["attempts", "last_attempt_at"])
    rule = delivery.event.rule
    outcome = webhooks.post(
        delivery.url,
        delivery.payload.encode(),
        secret=rule.secret,
        event_id=str(delivery.event_id),
        timeout=settings.ALERT_WEBHOOK_TIMEOUT_SECONDS,
        allow_private=settings.ALERT_WEBHOOK_ALLOW_PRIVATE,
    )
    delivery.last_status, delivery.last_error = outcome.status, outcome.error[:500]
    delivery.last_response, delivery.last_seconds = outcome.response[:2048], round(outcome.seconds, 4)
    verdict, delay = "retry", None
    if outcome.ok:
        verdict = delivery.state = WebhookDelivery.DELIVERED
    elif not outcome.retry or delivery.attempts >= settings.ALERT_WEBHOOK_MAX_ATTEMPTS:
        verdict = delivery.state = WebhookDelivery.FAILED
    else:
        delay = backoff(delivery.attempts)
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=delay)
    if verdict != "retry":
        delivery.finished_at, delivery.next_attempt_at = timezone.now(), None
    delivery.save()
    return verdict, delay
