"""The portal's Ed25519 signing key: where it comes from, its public record, rotation.

Order of precedence for the private key:

1. ``AUDIT_SIGNING_KEY`` — PKCS#8 PEM text (e.g. from a secret store, for several machines);
2. ``AUDIT_SIGNING_KEY_FILE`` — the path of such a PEM file (must exist);
3. ``AUDIT_SIGNING_KEY_DIR/signing-key.pem`` — created on first use with mode 0600 (exclusive create, so two
   processes starting together end up with one key).

Every key enters through the transparency log (workers/verify/keylog.py): the first key is introduced by an entry it
signs itself, a rotation is an entry the outgoing key signs, a retirement one the retired key signs. The published key
set is derived from those entries (:func:`key_history`); ``SigningKey`` is a projection of them that the application
role can only read (migration 0003, ``setup_db_roles``). A retired key stays in the set, so what it signed still
verifies. Deploying a different key without a rotation in the log is refused at the next signature. The private key
never enters the database.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import json

from django.conf import settings
from django.db import connection
from django.utils import timezone

from audit_portal.attestations.models import LogEntry, SigningKey, SubjectKind
from workers.verify import keylog
from workers.verify import keys as vkeys
from workers.verify import note as vnote

log = logging.getLogger(__name__)
KEY_FILE_NAME = "signing-key.pem"


class SigningKeyError(Exception):
    """The signing key cannot be loaded or used; the message says what to configure."""


@dataclass(frozen=True)
class Signer:
    private_key: object
    key_id: str


def key_path() -> Path:
    if settings.AUDIT_SIGNING_KEY_FILE:
        return Path(settings.AUDIT_SIGNING_KEY_FILE)
    return Path(settings.AUDIT_SIGNING_KEY_DIR) / KEY_FILE_NAME


def externally_configured() -> bool:
    return bool(settings.AUDIT_SIGNING_KEY or settings.AUDIT_SIGNING_KEY_FILE)


def _write_new_key(path: Path, *, replace: bool) -> None:
    """Write a fresh key to ``path`` with mode 0600: created under a temporary name, then linked (first start:
    fails if another process got there first) or renamed over the old key (rotation)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(vkeys.private_pem(vkeys.generate()))
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process created it first: use theirs
    finally:
        tmp.unlink(missing_ok=True)


def load_private_key():
    if not settings.AUDIT_SIGNING_ENABLED:
        raise SigningKeyError(
            "this process's role holds no signing key (AUDIT_SIGNING_ENABLED=0: the kernels worker); "
            "signing is done by the cpu queue's workers"
        )
    if settings.AUDIT_SIGNING_KEY:
        data = settings.AUDIT_SIGNING_KEY.encode()
        source = "AUDIT_SIGNING_KEY"
    else:
        path = key_path()
        if not path.exists():
            if settings.AUDIT_SIGNING_KEY_FILE:
                raise SigningKeyError(f"AUDIT_SIGNING_KEY_FILE points to {path}, which does not exist")
            _write_new_key(path, replace=False)
            log.info("created the certificate signing key %s", path)
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("the signing key %s is readable by others (mode %o); chmod 600 it", path, mode)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise SigningKeyError(f"cannot read the signing key {path}: {exc}") from None
        source = str(path)
    try:
        return vkeys.load_private_pem(data)
    except ValueError as exc:
        raise SigningKeyError(f"the signing key from {source} is not a usable Ed25519 PEM key: {exc}") from None


def configured_signer() -> Signer:
    """The configured private key (not yet checked against the log: see ``services.current_signer``)."""
    private_key = load_private_key()
    return Signer(private_key=private_key, key_id=vkeys.key_id(private_key.public_key()))


def key_history(*, events_only: bool = True) -> keylog.KeyHistory:
    """The key history derived from the log (:func:`workers.verify.keylog.derive`). ``events_only``: replay only the
    entries stored as key events (what signing needs); ``False``: every entry, so that each certificate's signer is
    checked too and a key event hidden under another kind is still seen (what ``verify_log`` does)."""
    qs = LogEntry.objects.order_by("index")
    if events_only:
        qs = qs.filter(subject_kind=SubjectKind.SIGNING_KEY)
    rows = qs.values_list("index", "envelope").iterator(chunk_size=500)
    return keylog.derive((index, _loads(envelope)) for index, envelope in rows)


def _loads(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


def table_keys() -> list[dict]:
    return list(SigningKey.objects.order_by("created_at", "id").values("key_id", "public_key", "status"))


def project_sqlite(event: str, key_id: str, public_key: str) -> None:
    """The key table's projection of a key event where no trigger writes it (SQLite: no roles, see migration 0003)."""
    if connection.vendor == "postgresql":
        return
    now = timezone.now()
    if event in (keylog.INTRODUCE, keylog.ROTATE):
        SigningKey.objects.filter(status=SigningKey.Status.ACTIVE).exclude(key_id=key_id).update(
            status=SigningKey.Status.RETIRED, retired_at=now
        )
        SigningKey.objects.get_or_create(
            key_id=key_id, defaults={"public_key": public_key, "algorithm": vkeys.ALGORITHM, "created_at": now}
        )
    elif event == keylog.RETIRE:
        SigningKey.objects.filter(key_id=key_id).update(status=SigningKey.Status.RETIRED, retired_at=now)


def new_key_for_rotation(new_key_file: str | None):
    """The private key to rotate to: read from ``new_key_file``, or (key kept in AUDIT_SIGNING_KEY_DIR) a fresh key
    written beside the current one as ``signing-key.pem.next``; :func:`install_next_key` moves it in place once the
    rotation is committed to the log. Returns (private key, path to install or None)."""
    if new_key_file:
        try:
            return vkeys.load_private_pem(Path(new_key_file).read_bytes()), None
        except (OSError, ValueError) as exc:
            raise SigningKeyError(f"cannot use {new_key_file} as the new signing key: {exc}") from None
    if externally_configured():
        raise SigningKeyError(
            "the signing key comes from AUDIT_SIGNING_KEY / AUDIT_SIGNING_KEY_FILE: run "
            "rotate_signing_key --to NEW.pem while the current key is still configured (the current "
            "key signs the rotation into the log), then deploy NEW.pem there"
        )
    nxt = key_path().with_name(KEY_FILE_NAME + ".next")
    nxt.unlink(missing_ok=True)
    _write_new_key(nxt, replace=False)
    return vkeys.load_private_pem(nxt.read_bytes()), nxt


def install_next_key(nxt: Path) -> None:
    os.replace(nxt, key_path())


def log_name() -> str:
    """The log's name in C2SP notes: the checkpoint origin and the note key's name (AUDIT_LOG_ORIGIN, whitespace
    and '+' made '-')."""
    return vnote.valid_name(settings.AUDIT_LOG_ORIGIN)


def with_note_keys(data: dict) -> dict:
    """Each key entry with ``note_key``: its C2SP verifier key (``name+hash+base64``) for checkpoint notes."""
    for entry in data["keys"]:
        try:
            public = vkeys.parse_key_set({"keys": [entry]})[entry["key_id"]][0]
            entry["note_key"] = vnote.verifier_key(log_name(), public)
        except (ValueError, KeyError):
            pass
    return data


def key_set() -> dict:
    """The published key set: every key the log introduced, active and retired, derived from the log's key events
    (format: workers/verify/keys.py) — never from the key table — each with its checkpoint-note verifier key."""
    return with_note_keys(key_history().key_set())
