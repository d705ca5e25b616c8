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
from audit_portal.attestations import selectors
from audit_portal.attestations.models import Checkpoint, Cosignature, LogCheck, LogEntry, SubjectKind
from audit_portal.attestations.selectors import leaf_hashes, verify_log
from workers.verify import checkpoint as vcheckpoint
from workers.verify import jcs, keylog, merkle, sign_statement
from workers.verify import keys as vkeys
from workers.verify import note as vnote

__all__ = [
    "AttestationError",
    "attest",
    "attest_fidelity_report",
    "attest_run_certificate",
    "attest_verdict",
    "current_signer",
    "lock_log",
    "retire_signing_key",
    "rotate_signing_key",
    "verify_log",
]  # verify_log: from selectors, for consistency checks

LOG_LOCK_ID = 0x61756469745F6C67  # "audit_lg": the advisory-lock key of the log (any fixed 64-bit value)


class AttestationError(Exception):
    """Signing or logging a certificate failed; the certificate must not be stored without it."""


def lock_log() -> None:
    """Serialize appends until the end of the current transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOG_LOCK_ID])


def _append(
    envelope: dict, *, kind: str, subject_id: int, project_id: int | None, predicate_type: str, key_id: str
) -> LogEntry:
    leaf = jcs.canonical(envelope)
    last = LogEntry.objects.order_by("-index").values_list("index", flat=True).first()
    index = 0 if last is None else last + 1
    return LogEntry.objects.create(
        index=index,
        leaf_hash=merkle.leaf_hash(leaf).hex(),
        envelope=leaf.decode(),
        predicate_type=predicate_type,
        subject_kind=kind,
        subject_id=subject_id,
        project_id=project_id,
        key_id=key_id,
    )


def _checkpoint(signer: keys.Signer) -> Checkpoint:
    hashes = leaf_hashes()
    root = merkle.root(hashes)
    env = vcheckpoint.sign(
        settings.AUDIT_LOG_ORIGIN,
        len(hashes),
        root,
        timezone.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        signer.private_key,
        signer.key_id,
    )
    envelope = jcs.canonical(env)
    key_entry = vkeys.key_entry(signer.private_key.public_key())
    # the witness copy is written once the append is committed (a rolled-back checkpoint is never witnessed)
    transaction.on_commit(lambda: witness.publish(envelope, len(hashes), key_entry))
    # the same tree head as a C2SP signed note (tlog-checkpoint), which transparency-log witnesses can cosign
    signed_note = vnote.sign(
        vnote.checkpoint_text(keys.log_name(), len(hashes), root), keys.log_name(), signer.private_key
    )
    return Checkpoint.objects.create(
        tree_size=len(hashes), root_hash=root.hex(), envelope=envelope.decode(), note=signed_note, key_id=signer.key_id
    )


def _now() -> str:
    return timezone.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _append_key_event(event: str, public_key, signer: keys.Signer, *, previous_key_id: str | None) -> LogEntry:
    envelope = keylog.sign_event(event, public_key, signer.private_key, previous_key_id=previous_key_id, time=_now())
    kid = vkeys.key_id(public_key)
    entry = _append(
        envelope,
        kind=SubjectKind.SIGNING_KEY,
        subject_id=0,
        project_id=None,
        predicate_type=keylog.KEY_PREDICATE,
        key_id=signer.key_id,
    )
    keys.project_sqlite(event, kid, vkeys.key_entry(public_key)["public_key"])
    return entry


def current_signer() -> keys.Signer:
    """The configured key, checked against the log's key history: the log's active key signs; on an empty key
    history the configured key is introduced (a log entry it signs itself, at the next index, with its checkpoint);
    any other key is refused — a new key enters the log only by a rotation the active key signs. Callers hold the
    log lock."""
    signer = keys.configured_signer()
    history = keys.key_history()
    if history.active == signer.key_id:
        return signer
    if not history.keys:
        _append_key_event(keylog.INTRODUCE, signer.private_key.public_key(), signer, previous_key_id=None)
        _checkpoint(signer)
        return signer
    if signer.key_id in history.keys:
        raise keys.SigningKeyError(
            f"the configured signing key {signer.key_id} was retired in the log; configure "
            f"the log's active key {history.active or '(none: the log was closed)'}"
        )
    raise keys.SigningKeyError(
        f"the configured signing key {signer.key_id} was never introduced through the log (its active key is "
        f"{history.active or '(none)'}): a new key enters only by a rotation the active key signs "
        "(manage.py rotate_signing_key [--to NEW.pem] with the current key still configured)"
    )


def attest(kind: str, subject) -> LogEntry:
    """Sign ``subject``'s statement and append it to the log (in the caller's transaction, if any)."""
    label = SubjectKind(kind).label.lower()
    try:
        with transaction.atomic():
            lock_log()
            signer = current_signer()
            # from the stored rows, the way the record check rebuilds it later
            stmt = statements.BUILDERS[kind](type(subject).objects.get(pk=subject.pk))
            envelope = sign_statement(stmt, signer.private_key, signer.key_id)
            entry = _append(
                envelope,
                kind=kind,
                subject_id=subject.pk,
                project_id=subject.project_id,
                predicate_type=stmt["predicateType"],
                key_id=signer.key_id,
            )
            _checkpoint(signer)
            return entry
    except Exception as exc:  # re-raised with what failed, so the job says so
        raise AttestationError(
            f"signing the {label} {subject.pk} failed (it is not signed nor in the transparency "
            f"log): {type(exc).__name__}: {exc}"
        ) from exc


def attest_run_certificate(certificate) -> LogEntry:
    return attest(SubjectKind.RUN_CERTIFICATE, certificate)


def attest_fidelity_report(report) -> LogEntry:
    return attest(SubjectKind.FIDELITY_REPORT, report)


def attest_verdict(submission) -> LogEntry:
    """The kernel conformance result of a finished submission (all its verdicts and the grade)."""
    return attest(SubjectKind.KERNEL_SUBMISSION, submission)


def rotate_signing_key(new_key_file: str | None = None) -> tuple[str | None, str]:
    """Rotate to a new key (``new_key_file``, or a fresh one in AUDIT_SIGNING_KEY_DIR): the outgoing key signs the
    rotation entry, the new key signs its checkpoint. Returns (old id, new id)."""
    with transaction.atomic():
        lock_log()
        old = current_signer()
        new_private, nxt = keys.new_key_for_rotation(new_key_file)
        new = keys.Signer(private_key=new_private, key_id=vkeys.key_id(new_private.public_key()))
        if new.key_id in keys.key_history().keys:
            raise keys.SigningKeyError(f"key {new.key_id} was introduced in the log before; rotate to a new key")
        _append_key_event(keylog.ROTATE, new_private.public_key(), old, previous_key_id=old.key_id)
        _checkpoint(new)
        if nxt is not None:
            transaction.on_commit(lambda: keys.install_next_key(nxt))
        return old.key_id, new.key_id


def retire_signing_key() -> str:
    """Retire the active key (an entry it signs): nothing signs after it. Returns its id."""
    with transaction.atomic():
        lock_log()
        signer = current_signer()
        _append_key_event(keylog.RETIRE, signer.private_key.public_key(), signer, previous_key_id=None)
        _checkpoint(signer)
        return signer.key_id


def add_cosignatures(body: str) -> tuple[int, str]:
    """Handle a tlog-witness add-checkpoint request carrying cosignatures (see :mod:`.tlog`). Returns (HTTP status,
    text): 200 with the accepted cosignature lines, or the refusal's status and reason."""
    try:
        old, proof, signed = vnote.parse_add_checkpoint(body)
        head = None
        for v in selectors.note_verifiers():
            try:
                head = vnote.open_checkpoint(signed, v)
                break
            except vnote.NoteError:
                continue
        if head is None:
            return 403, "the checkpoint is not signed by a key the log introduced\n"
    except vnote.NoteError as exc:
        return 400, f"{exc}\n"
    size = head["tree_size"]
    ck = Checkpoint.objects.filter(tree_size=size).first()
    if ck is None:
        return 404, f"the log has no checkpoint of tree size {size}\n"
    if bytes.fromhex(ck.root_hash) != head["root_hash"]:
        return 409, f"the log signed a different tree head for size {size}: this checkpoint is a fork\n"
    if old > size:
        return 400, f"old size {old} is larger than the checkpoint's {size}\n"
    if old:
        first = Checkpoint.objects.filter(tree_size=old).first()
        if first is None or not merkle.verify_consistency(
            old, size, proof, bytes.fromhex(first.root_hash), head["root_hash"]
        ):
            return 422, f"the consistency proof from size {old} to {size} does not verify\n"
    elif proof:
        return 422, "a proof from size 0 must be empty\n"
    try:
        accepted = vnote.verify_cosignatures(signed, selectors.witness_verifiers())
    except vnote.NoteError as exc:
        return 403, f"{exc}\n"
    if not accepted:
        return 403, "no cosignature by a witness this log is configured with (AUDIT_LOG_WITNESS_KEYS)\n"
    _, sigs = vnote.split(signed)
    lines = []
    by_text = {w.text: w for w in selectors.witness_verifiers()}
    for witness_text, timestamp in accepted.items():
        w = by_text[witness_text]
        raw = next(r for n, r in sigs if n == w.name and r[:4] == w.key_hash)
        line = vnote.signature_line(w.name, raw[:4], raw[4:])
        Cosignature.objects.update_or_create(
            tree_size=size, witness=witness_text, defaults={"timestamp": timestamp, "line": line}
        )
        lines.append(line)
    return 200, "".join(lines)


def record_log_check(now=None) -> tuple[LogCheck, LogCheck | None]:
    """One check of the whole log (:func:`verify_log`: entries, checkpoints, the key history derived from the log
    against the key table, the witnessed checkpoints) stored as a :class:`LogCheck`. Returns (this check, the one
    before it); the alert on a change is raised by :func:`audit_portal.alerts.log_integrity.check_and_alert`."""
    try:
        result = verify_log()
        ok, size, problems, warnings = result.ok, result.tree_size, result.problems, result.warnings
    except Exception as exc:  # noqa: BLE001 - a log that cannot be checked is reported as not consistent
        ok, size, problems, warnings = False, 0, [f"the log could not be checked: {type(exc).__name__}: {exc}"], []
    previous = LogCheck.objects.order_by("-checked_at", "-id").first()
    row = LogCheck.objects.create(
        ok=ok, tree_size=size, problems=problems[:100], warnings=warnings[:100], checked_at=now or timezone.now()
    )
    return row, previous
