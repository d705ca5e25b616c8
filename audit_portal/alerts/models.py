"""Alert rules on run metrics, their state per run, the events they raised and the webhook deliveries of those."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from audit_portal.accounts.models import Project
from audit_portal.alerts.rules import KIND_CHOICES
from audit_portal.runs.models import Run


class AlertRule(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=20, choices=KIND_CHOICES)
    threshold = models.FloatField()  # the budget, the rise per step, or the mask rate (rules.py)
    window = models.PositiveIntegerField(default=5)  # N: the last N steps a rising or rate rule reads
    webhook_url = models.CharField(max_length=2000, blank=True)  # empty: the page and the API only
    # HMAC key of the webhook signature. Kept as written (unlike API keys, which are stored hashed): signing needs
    # the key itself. Shown once when the rule is created; readable afterwards only by the database's operators.
    secret = models.CharField(max_length=64)
    enabled = models.BooleanField(default=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class AlertState(models.Model):
    """Armed (``firing=False``) or firing, per rule and run: an event is raised only when this flips."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="states")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alert_states")
    firing = models.BooleanField(default=False)
    value = models.FloatField(null=True)  # what the rule last compared
    message = models.CharField(max_length=500, blank=True)
    fired_count = models.PositiveIntegerField(default=0)
    changed_at = models.DateTimeField(null=True)
    evaluated_at = models.DateTimeField(default=timezone.now)
    # when the data last evaluated was current (a live view's last merge, a certificate's completion): an evaluation
    # of older data that arrives later (two workers, two segments) is ignored instead of flipping the state back
    as_of = models.DateTimeField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rule", "run"], name="one_alert_state_per_rule_run")]


class AlertEvent(models.Model):
    FIRED, RESOLVED = "fired", "resolved"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="events")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alert_events")
    kind = models.CharField(max_length=10, choices=[(FIRED, "fired"), (RESOLVED, "re-armed")])
    value = models.FloatField(null=True)
    message = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["rule", "-created_at"])]


class WebhookDelivery(models.Model):
    PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"

    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, related_name="deliveries")
    url = models.CharField(max_length=2000)
    payload = models.TextField()  # the exact bytes every attempt sends (the signature covers them)
    state = models.CharField(
        max_length=10, default=PENDING, choices=[(PENDING, "pending"), (DELIVERED, "delivered"), (FAILED, "failed")]
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    last_status = models.IntegerField(null=True)
    last_error = models.CharField(max_length=500, blank=True)
    last_response = models.CharField(max_length=2048, blank=True)
    last_seconds = models.FloatField(null=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True)
    next_attempt_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-created_at", "-id"]
