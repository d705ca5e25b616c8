"""Signed checkpoints (signed tree heads) of the transparency log.

A checkpoint commits to the whole log at one size: its payload is the RFC 8785 canonical JSON of::

    {"origin": "<log name>", "tree_size": n, "root_hash": hex(MTH(D[n])), "timestamp": "<ISO 8601 UTC>"}

signed as a DSSE envelope (:mod:`workers.verify.dsse`) of type :data:`CHECKPOINT_PAYLOAD_TYPE` with the same
Ed25519 key that signs the certificates. An inclusion proof verified against a checkpoint's root shows the
entry is in the log the key holder committed to; a consistency proof (RFC 6962 §2.1.2) between two checkpoints
shows the later log extends the earlier one without rewriting it.
"""

from __future__ import annotations

import json

from workers.verify import dsse, jcs, statement as st

CHECKPOINT_PAYLOAD_TYPE = "application/vnd.audit-portal.checkpoint+json"


def payload(origin: str, tree_size: int, root_hash: bytes, timestamp: str) -> bytes:
    return jcs.canonical(
        {"origin": origin, "tree_size": tree_size, "root_hash": root_hash.hex(), "timestamp": timestamp}
    )


def sign(origin: str, tree_size: int, root_hash: bytes, timestamp: str, private_key, keyid: str) -> dict:
    return dsse.sign(payload(origin, tree_size, root_hash, timestamp), CHECKPOINT_PAYLOAD_TYPE, private_key, keyid)


def open_checkpoint(envelope, public_keys) -> dict:
    """Verify a checkpoint envelope and return its body with ``root_hash`` as bytes and the signing ``keyid``.
    Raises :class:`dsse.EnvelopeError` naming the problem."""
    payload_type, body, keyid = dsse.verify(envelope, public_keys)
    if payload_type != CHECKPOINT_PAYLOAD_TYPE:
        raise dsse.EnvelopeError(f"payloadType is {payload_type!r}, not a checkpoint")
    try:
        data = json.loads(body)
        size = data["tree_size"]
        root = bytes.fromhex(data["root_hash"])
    except (ValueError, KeyError, TypeError) as exc:
        raise dsse.EnvelopeError(f"the checkpoint payload is malformed: {exc}") from None
    if not isinstance(size, int) or size < 0 or len(root) != 32 or not st.SHA256_RE.match(data["root_hash"]):
        raise dsse.EnvelopeError("the checkpoint has no valid tree_size and root_hash")
    return {**data, "root_hash": root, "keyid": keyid}
