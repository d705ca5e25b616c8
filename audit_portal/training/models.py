"""Training-step audits (ISSUE 7): one row per job with its configuration and the compact results.

Never per-token rows: the row keeps the engine's summaries, per-position series (downsampled) and a histogram; the
per-token exact TV/KL and top-K interval ends are one gzipped JSON file in the artifact store (docs/deploy.md#artifact-storage).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from audit_portal.accounts.models import Project
from audit_portal.jobs.models import Job


class TrainingAudit(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="training_audits")
    job = models.OneToOneField(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="training_audit")
    # the validated config (workers.training.config.validate): model size and seed, batch, prompts, numerics, …
    config = models.JSONField(default=dict)
    rollout_numerics = models.CharField(max_length=100)
    trainer_numerics = models.CharField(max_length=100, default="fp32,math")
    device_requested = models.CharField(max_length=8, default="auto")
    device_used = models.CharField(max_length=32, blank=True)  # set by the worker: cpu | cuda (+ its name in note)
    device_note = models.CharField(max_length=300, blank=True)
    submitted_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    # results (engine schema training-audit/1, summaries only)
    summary = models.JSONField(default=dict, blank=True)  # reward, batch, model params, torch, timing
    divergence = models.JSONField(default=dict, blank=True)  # exact TV/KL quantiles, shares over thresholds
    certificates = models.JSONField(default=dict, blank=True)  # per view "K=…": exact vs top-K certificate
    steps = models.JSONField(default=dict, blank=True)  # per loss: masked fraction, grad norm, post-step KL, …
    mask_agreement = models.JSONField(default=dict, blank=True)  # DPPO vs C-DPPO keep/mask counts
    profile = models.JSONField(default=dict, blank=True)  # per-position series (≤ MAX_POSITIONS bins), histogram
    tokens_storage = models.CharField(max_length=300, blank=True)  # artifact: per-token arrays (json.gz)
    tokens_bytes = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def __str__(self) -> str:
        return f"TrainingAudit {self.pk} ({self.rollout_numerics})"

    @property
    def is_complete(self) -> bool:
        return self.completed_at is not None

    def ordered_steps(self) -> list[tuple[str, dict]]:
        """Per-loss rows in the config's (canonical) order: Postgres jsonb does not keep key order."""
        steps = self.steps or {}
        order = [n for n in self.config.get("losses") or [] if n in steps]
        return [(n, steps[n]) for n in order + sorted(set(steps) - set(order))]

    @property
    def state(self) -> str:
        if self.completed_at is not None:
            return "complete"
        return self.job.state if self.job_id and self.job else "queued"
