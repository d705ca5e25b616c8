"""Fidelity audits (docs/fidelity-rules.md): one report per valid upload, per-call summaries, registered tokenizers.

Never per-token rows: a call row holds its spans (maximal runs of equal status, usually a handful) and counts; the
token ids, log-probs and the loss-mask export stay in the artifact store (docs/deploy.md#artifact-storage).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from audit_portal.accounts.models import Project
from audit_portal.runs.models import Run, Upload


class RegisteredTokenizer(models.Model):
    """A tokenizer a project trusts for its audits, keyed by the SHA-256 its records declare (``tokenizer.sha256``).

    ``kind`` ``hf``: a Hugging Face ``tokenizer.json``, sha256 of the file bytes (docs/fcr.md#conventions).
    ``toy_vocab``: a toy id→string vocabulary (docs/fcr.md#toy-tokenizer), sha256 of its canonical JSON (stored in canonical form, so file and key agree)."""

    class Kind(models.TextChoices):
        HF = "hf", "Hugging Face tokenizer.json"
        TOY_VOCAB = "toy_vocab", "Toy id→string vocabulary"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="fidelity_tokenizers")
    name = models.CharField(max_length=200)
    sha256 = models.CharField(max_length=64)
    kind = models.CharField(max_length=12, choices=Kind.choices, default=Kind.HF)
    size_bytes = models.BigIntegerField()
    vocab_size = models.IntegerField()
    storage_name = models.CharField(max_length=300)
    uploaded_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["project", "sha256"], name="one_tokenizer_per_sha_in_project")]

    def __str__(self) -> str:
        return f"{self.name} ({self.sha256[:12]})"


class FidelityReport(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Pending"  # calls being written; not shown until complete
        COMPLETE = "complete", "Complete"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="fidelity_reports")
    run = models.ForeignKey(Run, null=True, on_delete=models.SET_NULL, related_name="fidelity_reports")
    upload = models.OneToOneField(Upload, on_delete=models.CASCADE, related_name="fidelity_report")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    mode = models.CharField(max_length=12, default="transition")
    verdict = models.CharField(max_length=4, blank=True)  # PASS | FAIL
    verdict_reasons = models.JSONField(default=list)
    closed_failure_violations = models.BigIntegerField(default=0)
    coverage = models.JSONField(default=dict)  # docs/fidelity-rules.md#coverage-report, as the engine reports it
    protocol_warnings = models.JSONField(default=list)
    options = models.JSONField(default=dict)
    # {"used": [{"id", "name", "sha256", "kind"}], "unmatched": [sha256, …]} — which registered tokenizer the
    # audit could use for the drift diagnostic and the text/ids rule, and which declared hashes had none.
    tokenizers = models.JSONField(default=dict)
    mask_export = models.JSONField(default=dict)  # {"calls", "tokens_on", "files": {fmt: {storage_name, size_bytes}}}
    # Scalars for lists and the run page (also inside ``coverage``).
    calls_total = models.IntegerField(default=0)
    policy_tokens = models.BigIntegerField(default=0)
    verifiable_policy_tokens = models.BigIntegerField(default=0)
    verifiable_fraction = models.FloatField(null=True)
    spurious_call_rate = models.FloatField(null=True)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["run", "-created_at"])]

    def __str__(self) -> str:
        return f"fidelity report of upload {self.upload_id}"

    @property
    def headline(self) -> str:
        """The coverage, worded first wherever the verdict is shown (``"3.1% of policy tokens verifiable …"``)."""
        from workers.fidelity.verdict import headline

        return headline(self.verifiable_policy_tokens, self.policy_tokens)

    @property
    def verdict_label(self) -> str:
        """PASS / FAIL, or "PASS — nothing verifiable" (never a plain PASS over zero verifiable tokens)."""
        from workers.fidelity.verdict import verdict_label

        return verdict_label(self.verdict, self.verifiable_policy_tokens, self.policy_tokens)

    def coverage_gate(self, min_coverage: float) -> dict:
        """A CI gate over this report: met when the closed-failure verdict passed and at least ``min_coverage`` of
        the policy tokens are verifiable."""
        from workers.fidelity.verdict import coverage_gate_reason

        reason = coverage_gate_reason(self.verifiable_policy_tokens, self.policy_tokens, min_coverage)
        reasons = ([] if self.verdict == "PASS" else ["closed-failure verdict is FAIL"]) + ([reason] if reason else [])
        return {"min_coverage": min_coverage, "met": not reasons, "reasons": reasons}


class FidelityCall(models.Model):
    """One audited call (one ``fcr/1`` record): verdict, reasons, spans, counts."""

    report = models.ForeignKey(FidelityReport, on_delete=models.CASCADE, related_name="calls")
    line = models.IntegerField()
    # Offset of the record's line in an uncompressed upload, so the drill-down reads one line instead of the file.
    byte_offset = models.BigIntegerField(null=True)
    call_id = models.CharField(max_length=200, blank=True)
    trajectory_id = models.CharField(max_length=200, blank=True)
    call_index = models.IntegerField(null=True)
    sample_id = models.CharField(max_length=200, blank=True)
    step = models.IntegerField(null=True)
    role = models.CharField(max_length=12)
    role_source = models.CharField(max_length=12, blank=True)
    purpose = models.CharField(max_length=100, blank=True)
    inferred_purpose = models.CharField(max_length=100, blank=True)
    verdict = models.CharField(max_length=12)  # verifiable | partial | excluded
    primary_reason = models.CharField(max_length=40, blank=True)
    reasons = models.JSONField(default=list)
    # "|CODE|CODE|": a portable "has reason" filter (JSON containment is not available on every database).
    reasons_flat = models.CharField(max_length=1000, blank=True)
    # Compact spans: [[start, end, [reason, …]], …]; a span with no reasons is verifiable.
    spans = models.JSONField(default=list)
    n_tokens = models.IntegerField(default=0)
    verifiable_tokens = models.IntegerField(default=0)
    loss_mask_used = models.BooleanField(default=False)
    closed_failure_violations = models.IntegerField(default=0)
    drift_if_retokenized = models.BooleanField(null=True)
    lineage = models.CharField(max_length=40, blank=True)
    rules = models.JSONField(default=dict)
    alignment = models.JSONField(null=True)
    certificate = models.JSONField(null=True)  # per-call counts only (per-position lists stay out of Postgres)
    malformed = models.JSONField(null=True)

    class Meta:
        ordering = ["line", "id"]
        indexes = [
            models.Index(fields=["report", "line"]),
            models.Index(fields=["report", "verdict", "line"]),
            models.Index(fields=["report", "primary_reason", "line"]),
        ]

    def __str__(self) -> str:
        return f"{self.call_id or 'line ' + str(self.line)} ({self.verdict})"

    def span_dicts(self) -> list[dict]:
        return [{"start": s, "end": e, "verifiable": not r, "reasons": r} for s, e, r in self.spans]
