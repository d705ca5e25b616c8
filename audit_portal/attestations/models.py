"""Signed certificates and the append-only transparency log (docs/verify.md).

* ``SigningKey``: the public part of every Ed25519 key the portal has signed with (the private key lives in a file
  or the environment, never here). Retired keys stay, so what they signed stays verifiable. It is a *projection* of
  the key events in the log (migration 0003: a trigger owned by the owner role writes it; the application role may
  only SELECT it). The key set anyone verifies with is derived from the log (``keys.key_history``), and a row here
  that the log did not introduce is reported by ``verify_log``.
* ``LogEntry``: one leaf of the RFC 6962 Merkle tree — a certificate's DSSE envelope, stored as the exact RFC 8785
  canonical JSON bytes that were hashed (``leaf_hash = SHA-256(0x00 || envelope)``).
* ``Checkpoint``: a signed tree head (tree size + root hash) written after every append.

LogEntry and Checkpoint are append-only: database triggers (migration 0002) refuse UPDATE and DELETE on both
PostgreSQL and SQLite. They hold no foreign keys on purpose: the log outlives what it speaks about, and a cascade
from a deleted project must never reach it.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class SubjectKind(models.TextChoices):
    RUN_CERTIFICATE = "run_certificate", "Run certificate"
    FIDELITY_REPORT = "fidelity_report", "Fidelity report"
    KERNEL_SUBMISSION = "kernel_submission", "Kernel conformance result"
    SIGNING_KEY = "signing_key", "Signing key event"  # introduction, rotation, retirement (workers/verify/keylog.py)


class SigningKey(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        RETIRED = "retired", "Retired"

    key_id = models.CharField(max_length=64, unique=True)  # hex SHA-256 of the raw public key
    algorithm = models.CharField(max_length=16, default="ed25519")
    public_key = models.CharField(max_length=64)  # base64 of the raw 32-byte Ed25519 public key
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(default=timezone.now)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.key_id[:16]}… ({self.status})"


class LogEntry(models.Model):
    index = models.BigIntegerField(unique=True)
    leaf_hash = models.CharField(max_length=64)
    envelope = models.TextField()  # RFC 8785 canonical JSON of the DSSE envelope: the leaf, byte for byte
    predicate_type = models.CharField(max_length=200)
    subject_kind = models.CharField(max_length=32, choices=SubjectKind.choices)
    subject_id = models.BigIntegerField()
    project_id = models.BigIntegerField(null=True)  # for scoping reads; not a foreign key (see module docstring)
    key_id = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["index"]
        indexes = [models.Index(fields=["subject_kind", "subject_id", "-index"])]

    def __str__(self) -> str:
        return f"log entry {self.index} ({self.subject_kind} {self.subject_id})"


class Checkpoint(models.Model):
    tree_size = models.BigIntegerField(unique=True)
    root_hash = models.CharField(max_length=64)
    envelope = models.TextField()  # RFC 8785 canonical JSON of the signed checkpoint envelope
    # the same tree head as a C2SP tlog-checkpoint signed note (workers/verify/note.py); null before migration 0004
    note = models.TextField(null=True, blank=True)
    key_id = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tree_size"]

    def __str__(self) -> str:
        return f"checkpoint {self.tree_size} {self.root_hash[:12]}…"


class Cosignature(models.Model):
    """A witness's C2SP tlog-cosignature (cosignature/v1) on the checkpoint note of ``tree_size``, as received by
    ``POST /api/v1/log/add-checkpoint`` and verified against a configured witness key (AUDIT_LOG_WITNESS_KEYS).
    Self-authenticating: a verifier checks it against the witness keys *it* pinned."""

    tree_size = models.BigIntegerField()
    witness = models.CharField(max_length=300)  # the witness's verifier key string
    timestamp = models.BigIntegerField()
    line = models.TextField()  # the signature line, as it goes under the note
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tree_size", "witness"]
        constraints = [models.UniqueConstraint(fields=["tree_size", "witness"], name="one_cosignature_per_witness")]


class LogCheck(models.Model):
    """One scheduled check of the transparency log (``attestations.services.check_log``, celery beat): the whole log
    against its signatures, its key history and its witnesses. The latest row drives the banner on every page; a
    change from consistent to not raises the alert (page channel and every alert rule's webhook)."""

    ok = models.BooleanField()
    tree_size = models.BigIntegerField(default=0)
    problems = models.JSONField(default=list)
    warnings = models.JSONField(default=list)
    checked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-checked_at", "-id"]
