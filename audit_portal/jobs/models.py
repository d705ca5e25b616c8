"""Background jobs: one row per unit of work a worker does, with live progress and a terminal reason."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from audit_portal.accounts.models import Project


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


TERMINAL_STATES = {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}


class Job(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="jobs")
    kind = models.CharField(max_length=40)  # e.g. "validate_upload", "certify_upload"
    task_name = models.CharField(max_length=120)
    queue = models.CharField(max_length=16, default="cpu")
    subject_kind = models.CharField(max_length=40, blank=True)
    subject_id = models.BigIntegerField(null=True, blank=True)
    title = models.CharField(max_length=200, blank=True)
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    progress = models.FloatField(default=0.0)
    message = models.CharField(max_length=500, blank=True)
    error = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    submitted_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # A job queued behind another: its task is sent when that one ends, whatever the outcome (services.create_job's
    # ``after``). A whole-file audit waits so that a certification cut into pieces has every worker for them.
    after = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="waiting")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["project", "-created_at"]),
            models.Index(fields=["subject_kind", "subject_id"]),
            models.Index(fields=["state", "heartbeat_at"]),
        ]

    def __str__(self) -> str:
        return f"Job {self.pk} {self.kind} [{self.state}]"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def as_event(self) -> dict:
        """The JSON shape pushed over websockets and returned by the API."""
        return {
            "id": self.pk,
            "project_id": self.project_id,
            "kind": self.kind,
            "title": self.title,
            "state": self.state,
            "progress": round(self.progress, 4),
            "message": self.message,
            "error": self.error,
            "result": self.result,
            "attempts": self.attempts,
            "subject_kind": self.subject_kind,
            "subject_id": self.subject_id,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "outcome": self.outcome,
        }

    @property
    def outcome(self) -> dict:
        """The state in plain words, its badge colour and, once succeeded, what it produced (jobs/outcomes.py)."""
        from audit_portal.jobs.outcomes import job_outcome

        return job_outcome(self)
