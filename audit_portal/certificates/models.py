"""Run certificates: one per certified upload, with per-step aggregates and per-sequence summaries.

Never per-token rows: token-level data stays in the uploaded file (docs/deploy.md#artifact-storage)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from audit_portal.accounts.models import Project
from audit_portal.runs.models import Run, Upload


class RunCertificate(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Pending"  # sequences being written; not shown until complete
        COMPLETE = "complete", "Complete"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="certificates")
    run = models.ForeignKey(Run, null=True, on_delete=models.SET_NULL, related_name="certificates")
    upload = models.OneToOneField(Upload, on_delete=models.CASCADE, related_name="certificate")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    options = models.JSONField(default=dict)
    summary = models.JSONField(default=dict)
    bounds = models.JSONField(default=dict)
    budget = models.JSONField(default=dict, blank=True)
    length_buckets = models.JSONField(default=list)
    histograms = models.JSONField(default=dict)
    errors = models.JSONField(default=list)
    caveats = models.JSONField(default=list)
    # Scalars for lists and comparisons (also inside ``summary``).
    tokens = models.BigIntegerField(default=0)
    sequences = models.IntegerField(default=0)
    acceptance_rate = models.FloatField(null=True)
    eps_hat = models.FloatField(null=True)
    delta_hat = models.FloatField(null=True)
    best_bound = models.FloatField(null=True)
    best_bound_id = models.CharField(max_length=20, blank=True)
    data_errors = models.IntegerField(default=0)
    verdict = models.CharField(max_length=20, blank=True, db_index=True)  # workers/certify/verdict.py's code
    verdict_detail = models.JSONField(default=dict, blank=True)  # its label, sentence and what would change it
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["run", "-created_at"])]

    def __str__(self) -> str:
        return f"certificate of upload {self.upload_id}"


class StepAggregate(models.Model):
    certificate = models.ForeignKey(RunCertificate, on_delete=models.CASCADE, related_name="steps")
    step = models.IntegerField(null=True)
    sequences = models.IntegerField()
    tokens = models.BigIntegerField()
    accepted = models.IntegerField()
    acceptance_rate = models.FloatField(null=True)
    eps_hat_max = models.FloatField(null=True)
    eps_hat_mean = models.FloatField(null=True)
    delta_hat = models.FloatField(null=True)
    mean_k3 = models.FloatField(null=True)
    status_counts = models.JSONField(default=dict)
    metrics = models.JSONField(default=dict, blank=True)  # |Δ log p|, k1/k2/k3, χ², PPL, IS weights (step_metrics)

    class Meta:
        ordering = ["step"]
        indexes = [models.Index(fields=["certificate", "step"])]


class SequenceSummary(models.Model):
    certificate = models.ForeignKey(RunCertificate, on_delete=models.CASCADE, related_name="sequence_summaries")
    call_id = models.CharField(max_length=200, blank=True)
    trajectory_id = models.CharField(max_length=200, blank=True)
    step = models.IntegerField(null=True)
    line = models.IntegerField()
    length = models.IntegerField(null=True)
    status = models.CharField(max_length=16)
    accept = models.BooleanField()
    eps_hat = models.FloatField(null=True)
    delta_hat = models.FloatField(null=True)
    tv_lo_max = models.FloatField(null=True)
    mean_k3 = models.FloatField(null=True)
    max_k2 = models.FloatField(null=True)
    a_y = models.FloatField(null=True)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["line"]
        indexes = [
            # the unfiltered page (ordered by line, id): without it a page of a 10⁶-row certificate sorts every row
            models.Index(fields=["certificate", "line", "id"], name="seqsummary_cert_line"),
            models.Index(fields=["certificate", "status", "line"]),
            models.Index(fields=["certificate", "step", "line"]),
        ]


class CertificateChunk(models.Model):
    """One piece of an upload certified by one worker (issue #18): the engine's partial certificate
    (workers/certify/partial.py) and the ε̂/δ̂ histogram counts of its sequences. Unique per (job, index), and
    written in the same transaction as the piece's sequence rows, so a piece retried after its worker died is
    stored once: nothing is counted twice."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="certificate_chunks")
    certificate = models.ForeignKey(RunCertificate, on_delete=models.CASCADE, related_name="chunks")
    index = models.IntegerField()
    partial = models.JSONField()
    histograms = models.JSONField(default=dict)
    sequences = models.IntegerField(default=0)
    tokens = models.BigIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["index"]
        constraints = [models.UniqueConstraint(fields=["job", "index"], name="certificate_chunk_once")]
