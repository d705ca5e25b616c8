"""The portal's Ed25519 signing key: where it comes from, its public record, rotation.

Order of precedence for the private key:

1. ``AUDIT_SIGNING_KEY`` — PKCS#8 PEM text (e.g. from a secret store, for several machines);
2. ``AUDIT_SIGNING_KEY_FILE`` — the path of such a PEM file (must exist);
3. ``AUDIT_SIGNING_KEY_DIR/signing-key.pem`` — created on first use with mode 0600 (exclusive create, so two
   processes starting together end up with one key).

Every key that signs is recorded in ``SigningKey`` (public part, key id = hex SHA-256 of the raw public key).
When the configured key changes (a rotation here, or a new secret deployed), the new key becomes ``active`` and
the previous one ``retired``: its public part stays in the published key set, so what it signed still verifies.
The private key never enters the database.
"""
from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from audit_portal.attestations.models import SigningKey
from workers.verify import keys as vkeys

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
        raise SigningKeyError("this process's role holds no signing key (AUDIT_SIGNING_ENABLED=0: the kernels worker); "
                              "signing is done by the cpu queue's workers")
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


def register(public_key) -> SigningKey:
    """Record ``public_key`` as the active key (retiring any other active one). Callers hold the log lock."""
    entry = vkeys.key_entry(public_key)
    row, _ = SigningKey.objects.get_or_create(
        key_id=entry["key_id"], defaults={"public_key": entry["public_key"], "algorithm": vkeys.ALGORITHM})
    if row.status == SigningKey.Status.RETIRED:
        raise SigningKeyError(f"the configured signing key {row.key_id} was retired on {row.retired_at:%Y-%m-%d}; "
                              "configure the current key (or rotate to a new one)")
    SigningKey.objects.filter(status=SigningKey.Status.ACTIVE).exclude(pk=row.pk).update(
        status=SigningKey.Status.RETIRED, retired_at=timezone.now())
    return row


def active_signer() -> Signer:
    """The configured private key, registered as the active key. Callers hold the log lock."""
    private_key = load_private_key()
    row = register(private_key.public_key())
    return Signer(private_key=private_key, key_id=row.key_id)


def rotate() -> tuple[str | None, str]:
    """Replace the key file with a new key, register it, retire the old one. Returns (old id, new id).
    A key given through the environment is rotated by changing that setting instead."""
    if externally_configured():
        raise SigningKeyError("the signing key comes from AUDIT_SIGNING_KEY / AUDIT_SIGNING_KEY_FILE: deploy a new key "
                              "there; the old key is retired (and stays verifiable) when the new one first signs")
    old = SigningKey.objects.filter(status=SigningKey.Status.ACTIVE).values_list("key_id", flat=True).first()
    _write_new_key(key_path(), replace=True)
    return old, active_signer().key_id


def key_set() -> dict:
    """The published key set: every key that ever signed, active and retired (format: workers/verify/keys.py)."""
    return {"keys": [{"key_id": k.key_id, "algorithm": k.algorithm, "public_key": k.public_key, "status": k.status,
                      "created_at": k.created_at.isoformat(),
                      "retired_at": k.retired_at.isoformat() if k.retired_at else None}
                     for k in SigningKey.objects.order_by("created_at", "id")]}
