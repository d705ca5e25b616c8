"""Ed25519 keys: key ids and the published key set.

A key id is the lowercase hex SHA-256 of the raw 32-byte public key (RFC 8032 encoding). The key set the
portal serves (``/api/v1/keys/``, ``/.well-known/audit-portal-keys.json``) and puts in every bundle is::

    {"keys": [{"key_id": hex, "algorithm": "ed25519", "public_key": base64(raw 32 bytes),
               "status": "active" | "retired", "created_at": …, "retired_at": …}]}

Retired keys stay in the set: certificates they signed stay verifiable after a rotation.
"""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from workers.verify.dsse import EnvelopeError, b64decode, b64encode

ALGORITHM = "ed25519"


def public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    """Lowercase hex SHA-256 of the raw public key."""
    return hashlib.sha256(public_bytes(key)).hexdigest()


def generate() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_private_pem(data: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the signing key is not an Ed25519 private key")
    return key


def key_entry(key: Ed25519PublicKey, *, status: str = "active", created_at=None, retired_at=None) -> dict:
    return {
        "key_id": key_id(key),
        "algorithm": ALGORITHM,
        "public_key": b64encode(public_bytes(key)),
        "status": status,
        "created_at": created_at,
        "retired_at": retired_at,
    }


def parse_key_set(data) -> dict[str, tuple[Ed25519PublicKey, dict]]:
    """keyid → (public key, entry) of a key set; an entry whose id is not the hash of its key is refused."""
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise EnvelopeError('the key set is not {"keys": [...]}')
    out = {}
    for entry in data["keys"]:
        if not isinstance(entry, dict) or entry.get("algorithm") != ALGORITHM:
            continue
        raw = b64decode(entry.get("public_key"))
        if len(raw) != 32:
            raise EnvelopeError(f"key {entry.get('key_id')}: an Ed25519 public key is 32 bytes, not {len(raw)}")
        key = Ed25519PublicKey.from_public_bytes(raw)
        if key_id(key) != entry.get("key_id"):
            raise EnvelopeError(f"key {entry.get('key_id')}: the key id is not the SHA-256 of the public key")
        out[entry["key_id"]] = (key, entry)
    return out
