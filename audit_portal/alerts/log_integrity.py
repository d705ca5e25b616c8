"""The log-integrity alert: raised by the scheduled check (:func:`check_and_alert`, celery beat) when the transparency log stops
verifying, through the alert channels that already exist — every project's alerts page group on the channel layer
(:mod:`audit_portal.core.broadcast`) and a signed POST (:mod:`audit_portal.alerts.webhooks`, the same HMAC headers as
rule alerts, ``X-Audit-Portal-Event: log-check-<id>``) to the webhook of every enabled alert rule — and the banner
every page shows (``audit_portal.attestations.context_processors.banner``)."""

from __future__ import annotations

import json
import logging

from django.conf import settings

from audit_portal.alerts import webhooks
from audit_portal.alerts.models import AlertRule
from audit_portal.attestations.models import LogCheck
from audit_portal.attestations.services import record_log_check
from audit_portal.core.broadcast import publish

log = logging.getLogger(__name__)


def payload(check: LogCheck, fired: bool) -> bytes:
    body = {
        "type": "log_integrity.fired" if fired else "log_integrity.resolved",
        "check_id": check.pk,
        "checked_at": check.checked_at.isoformat(),
        "tree_size": check.tree_size,
        "problems": [p[:300] for p in check.problems[:5]],
        "problem_count": len(check.problems),
        "how_to_check": "manage.py check_consistency; docs/verify.md",
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def raise_alert(check: LogCheck, *, fired: bool) -> list[tuple[str, bool]]:
    """Send the alert; returns (webhook URL, delivered) for each webhook tried. Never raises."""
    if fired:
        log.error("transparency log check %s: NOT consistent: %s", check.pk, "; ".join(check.problems[:3]))
    body = payload(check, fired)
    from audit_portal.accounts.models import Project

    groups = [f"alerts.{pk}" for pk in Project.objects.values_list("pk", flat=True)]
    publish({"type": "log.integrity", "fired": fired, "check": json.loads(body)}, *groups)
    sent, seen = [], set()
    for rule in AlertRule.objects.filter(enabled=True).exclude(webhook_url="").order_by("pk"):
        if (rule.webhook_url, rule.secret) in seen:
            continue
        seen.add((rule.webhook_url, rule.secret))
        try:
            outcome = webhooks.post(
                rule.webhook_url,
                body,
                secret=rule.secret,
                event_id=f"log-check-{check.pk}",
                timeout=settings.ALERT_WEBHOOK_TIMEOUT_SECONDS,
                allow_private=settings.ALERT_WEBHOOK_ALLOW_PRIVATE,
            )
            sent.append((rule.webhook_url, outcome.ok))
        except Exception as exc:  # noqa: BLE001 - one receiver's failure must not stop the others
            log.error("log-integrity alert to %s failed: %s", rule.webhook_url, exc)
            sent.append((rule.webhook_url, False))
    return sent


def check_and_alert(now=None) -> LogCheck:
    """Check the log now (``record_log_check``); alert when it goes from consistent to not (or the first check
    finds it not), and say so when it comes back."""
    row, previous = record_log_check(now)
    if (previous is None or previous.ok) and not row.ok:
        raise_alert(row, fired=True)
    elif previous is not None and not previous.ok and row.ok:
        raise_alert(row, fired=False)
    return row
