"""DSSE envelopes (Dead Simple Signing Envelope, secure-systems-lab/dsse, protocol v1) with Ed25519.

The signature is over the *pre-authentication encoding* of the payload, never over the JSON envelope::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

where ``SP`` is one ASCII space and ``LEN`` the byte length as ASCII decimal without leading zeros. Binding the
payload type this way means a signature over one kind of document cannot be replayed as another. The envelope
is ``{"payload": base64(body), "payloadType": type, "signatures": [{"keyid": …, "sig": base64(sig)}]}``
(standard base64 with padding). Ed25519 is RFC 8032 (``cryptography``'s implementation).
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


class EnvelopeError(ValueError):
    """An envelope that is not well-formed DSSE."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding of ``payload`` under ``payload_type``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def b64decode(text: str) -> bytes:
    if not isinstance(text, str):
        raise EnvelopeError("expected a base64 string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise EnvelopeError(f"invalid base64: {exc}") from None


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def sign(payload: bytes, payload_type: str, private_key: Ed25519PrivateKey, keyid: str) -> dict:
    """A DSSE envelope holding ``payload`` with one Ed25519 signature over ``PAE(payload_type, payload)``."""
    sig = private_key.sign(pae(payload_type, payload))
    return {
        "payload": b64encode(payload),
        "payloadType": payload_type,
        "signatures": [{"keyid": keyid, "sig": b64encode(sig)}],
    }


def parse(envelope) -> tuple[str, bytes, list[tuple[str, bytes]]]:
    """``(payload_type, payload, [(keyid, sig), …])`` of a well-formed envelope; :class:`EnvelopeError` otherwise."""
    if not isinstance(envelope, dict):
        raise EnvelopeError("the envelope is not a JSON object")
    payload_type = envelope.get("payloadType")
    if not isinstance(payload_type, str) or not payload_type:
        raise EnvelopeError("the envelope has no payloadType")
    payload = b64decode(envelope.get("payload"))
    sigs = envelope.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise EnvelopeError("the envelope has no signatures")
    out = []
    for s in sigs:
        if not isinstance(s, dict) or not isinstance(s.get("keyid", ""), str):
            raise EnvelopeError("a signature entry is not an object with keyid and sig")
        out.append((s.get("keyid", ""), b64decode(s.get("sig"))))
    return payload_type, payload, out


def verify(envelope, public_keys: dict[str, Ed25519PublicKey]) -> tuple[str, bytes, str]:
    """Check the envelope's signatures against ``public_keys`` (keyid → key). Returns ``(payload_type, payload,
    keyid)`` of the first signature that verifies; raises :class:`EnvelopeError` naming why none did."""
    payload_type, payload, sigs = parse(envelope)
    message = pae(payload_type, payload)
    reasons = []
    for keyid, sig in sigs:
        key = public_keys.get(keyid)
        if key is None:
            reasons.append(f"key {keyid[:16] or '(none)'}… is not in the key set")
            continue
        try:
            key.verify(sig, message)
        except InvalidSignature:
            reasons.append(f"the signature by key {keyid[:16]}… does not match the payload")
            continue
        return payload_type, payload, keyid
    raise EnvelopeError("; ".join(reasons))
