"""Offline verification of Audit Portal certificates: RFC 8785 canonical JSON, DSSE envelopes with Ed25519,
in-toto Statements v1, RFC 6962 Merkle trees, signed checkpoints and certificate bundles.

No Django import anywhere in this package: the portal (``audit_portal.attestations``) signs and logs with these
functions, and ``python -m workers.verify`` checks the result with the same code. See ``docs/verify.md``.
"""

from workers.verify import checkpoint, dsse, jcs, keys, merkle, statement
from workers.verify.bundle import (
    BUNDLE_MEDIA_TYPE,
    Check,
    Report,
    build_bundle,
    envelope_leaf,
    file_sha256,
    sign_statement,
    verify_bundle,
)

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "Check",
    "Report",
    "build_bundle",
    "checkpoint",
    "dsse",
    "envelope_leaf",
    "file_sha256",
    "jcs",
    "keys",
    "merkle",
    "sign_statement",
    "statement",
    "verify_bundle",
]
