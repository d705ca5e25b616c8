"""Writes for signed certificates and the transparency log.

``attest_run_certificate``, ``attest_fidelity_report`` and ``attest_verdict`` are called at the end of the store
functions of the certificates, fidelity and kernels apps. Each builds the in-toto Statement from the stored rows
(:mod:`audit_portal.attestations.statements`), signs it in a DSSE envelope with the active Ed25519 key and appends
the envelope to the log, writing a new signed checkpoint — all inside the caller's transaction. A failure raises
:class:`AttestationError`, which fails the job with the reason (and, where the store function is atomic — run
certificates, fidelity reports — rolls the certificate back): a certificate is never left unsigned silently.
A regenerated certificate appends a new entry; pages show the latest.

Appends are serialized: on PostgreSQL by a transaction-scoped advisory lock (``pg_advisory_xact_lock``), on
SQLite by its single writer (the embedded settings open write transactions IMMEDIATE); the unique ``index``
column is the backstop on both.
"""
from __future__ import annotations

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit_portal.attestations import keys, statements, witness
from audit_portal.attestations.models import Checkpoint, LogEntry, SubjectKind
from audit_portal.attestations.selectors import leaf_hashes, verify_log
from workers.verify import checkpoint as vcheckpoint
from workers.verify import jcs, merkle, sign_statement
from workers.verify import keys as vkeys

__all__ = ["AttestationError", "attest", "attest_fidelity_report", "attest_run_certificate", "attest_verdict",
           "lock_log", "rotate_signing_key", "verify_log"]  # verify_log: from selectors, for consistency checks

LOG_LOCK_ID = 0x61756469745F6C67  # "audit_lg": the advisory-lock key of the log (any fixed 64-bit value)


class AttestationError(Exception):
    """Signing or logging a certificate failed; the certificate must not be stored without it."""


def lock_log() -> None:
    """Serialize appends until the end of the current transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOG_LOCK_ID])


def _append(envelope: dict, *, kind: str, subject_id: int, project_id: int | None, predicate_type: str,
            key_id: str) -> LogEntry:
    leaf = jcs.canonical(envelope)
    last = LogEntry.objects.order_by("-index").values_list("index", flat=True).first()
    index = 0 if last is None else last + 1
    return LogEntry.objects.create(index=index, leaf_hash=merkle.leaf_hash(leaf).hex(), envelope=leaf.decode(),
                                   predicate_type=predicate_type, subject_kind=kind, subject_id=subject_id,
                                   project_id=project_id, key_id=key_id)


def _checkpoint(signer: keys.Signer) -> Checkpoint:
    hashes = leaf_hashes()
    root = merkle.root(hashes)
    env = vcheckpoint.sign(settings.AUDIT_LOG_ORIGIN, len(hashes), root,
                           timezone.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ"), signer.private_key, signer.key_id)
    envelope = jcs.canonical(env)
    key_entry = vkeys.key_entry(signer.private_key.public_key())
    # the witness copy is written once the append is committed (a rolled-back checkpoint is never witnessed)
    transaction.on_commit(lambda: witness.publish(envelope, len(hashes), key_entry))
    return Checkpoint.objects.create(tree_size=len(hashes), root_hash=root.hex(), envelope=envelope.decode(),
                                     key_id=signer.key_id)


def attest(kind: str, subject) -> LogEntry:
    """Sign ``subject``'s statement and append it to the log (in the caller's transaction, if any)."""
    label = SubjectKind(kind).label.lower()
    try:
        with transaction.atomic():
            lock_log()
            signer = keys.active_signer()
            # from the stored rows, the way the record check rebuilds it later
            stmt = statements.BUILDERS[kind](type(subject).objects.get(pk=subject.pk))
            envelope = sign_statement(stmt, signer.private_key, signer.key_id)
            entry = _append(envelope, kind=kind, subject_id=subject.pk, project_id=subject.project_id,
                            predicate_type=stmt["predicateType"], key_id=signer.key_id)
            _checkpoint(signer)
            return entry
    except Exception as exc:  # noqa: BLE001 - re-raised with what failed, so the job says so
        raise AttestationError(f"signing the {label} {subject.pk} failed (it is not signed nor in the transparency "
                               f"log): {type(exc).__name__}: {exc}") from exc


def attest_run_certificate(certificate) -> LogEntry:
    return attest(SubjectKind.RUN_CERTIFICATE, certificate)


def attest_fidelity_report(report) -> LogEntry:
    return attest(SubjectKind.FIDELITY_REPORT, report)


def attest_verdict(submission) -> LogEntry:
    """The kernel conformance result of a finished submission (all its verdicts and the grade)."""
    return attest(SubjectKind.KERNEL_SUBMISSION, submission)


def rotate_signing_key() -> tuple[str | None, str]:
    with transaction.atomic():
        lock_log()
        return keys.rotate()
