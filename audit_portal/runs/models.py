"""Runs and their uploaded logs. Token-level data stays in the artifact store, never in Postgres."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from audit_portal.accounts.models import Project


class Run(models.Model):
    """An RL training run (the ``run_id`` of its ``fcr/1`` records) inside a project."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=200)
    # Declared by a trainer client when it starts the run (POST /projects/<slug>/runs/; docs/client.md)
    config = models.JSONField(default=dict, blank=True)
    tags = models.JSONField(default=list, blank=True)
    state = models.CharField(
        max_length=10,
        choices=[("running", "Running"), ("finished", "Finished"), ("failed", "Failed"), ("", "Not declared")],
        default="",
        blank=True,
    )
    missing_steps = models.JSONField(default=list, blank=True)  # steps the client could not log (disk, network)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="run_name_unique_in_project")]

    def __str__(self) -> str:
        return self.name


class UploadStage(models.TextChoices):
    RECEIVED = "received", "Received"
    PROCESSING = "processing", "Processing"
    VALID = "valid", "Valid"
    INVALID = "invalid", "Invalid"
    DUPLICATE = "duplicate", "Duplicate"


class Upload(models.Model):
    """One submitted run-log file. A resubmission of the same bytes is recorded as ``duplicate`` of the
    first upload (audit trail) and stores nothing new."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="uploads")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="uploads")
    original_name = models.CharField(max_length=255)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    content_type = models.CharField(max_length=100, blank=True)
    compression = models.CharField(max_length=10, default="none")  # "none" | "gzip"
    format = models.CharField(max_length=20, default="fcr/1")
    storage_name = models.CharField(max_length=300, blank=True)
    stage = models.CharField(max_length=16, choices=UploadStage.choices, default=UploadStage.RECEIVED, db_index=True)
    duplicate_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="resubmissions"
    )
    validation = models.JSONField(default=dict, blank=True)
    error_count = models.IntegerField(default=0)
    submitted_by = models.CharField(max_length=150, blank=True)
    # Given with the upload (runs/declarations.py): merged into its run's config and tags when it turns valid
    config = models.JSONField(default=dict, blank=True)
    tags = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "sha256"],
                condition=Q(duplicate_of__isnull=True),
                name="one_original_upload_per_digest",
            )
        ]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.original_name} ({self.sha256[:12]})"

    @property
    def original(self) -> "Upload":
        return self.duplicate_of or self


class ValidationPiece(models.Model):
    """One piece of an upload validated by one worker (workers/fcr/validate_pieces.py): the piece's share of the
    summary, with what the merge needs for the file-level rules. Unique per (job, index), so a piece whose task was
    delivered twice is stored once; the task that stores the last piece merges them into ``Upload.validation``."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="validation_pieces")
    index = models.IntegerField()
    result = models.JSONField()
    worker = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["index"]
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="validation_piece_once")]


class UploadSession(models.Model):
    """A resumable upload in parts (audit_portal/runs/chunked.py): declared size and SHA-256, parts of
    ``part_size`` bytes sent in any order and any number of times into one preallocated file in
    ``artifacts/incoming/``, then completed: the digest is checked and the file goes through the same intake as a
    single-request upload. The id is the capability a client resumes with."""

    class State(models.TextChoices):
        OPEN = "open", "Open"
        COMPLETED = "completed", "Completed"

    id = models.UUIDField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="upload_sessions")
    name = models.CharField(max_length=255)
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    part_size = models.BigIntegerField()
    parts_received = models.JSONField(default=list, blank=True)  # sorted part numbers (0-based)
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN, db_index=True)
    upload = models.ForeignKey(Upload, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    config = models.JSONField(default=dict, blank=True)  # given at creation, handed to the upload at completion
    tags = models.JSONField(default=list, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    @property
    def part_count(self) -> int:
        return max(1, -(-self.size_bytes // self.part_size))

    def part_length(self, n: int) -> int:
        return min(self.part_size, self.size_bytes - n * self.part_size)
