"""in-toto Attestation Framework: Statement v1 (https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md).

A Statement binds *subjects* — the artifacts it speaks about, each a ResourceDescriptor with a name and a
``digest`` map (here always ``sha256``) — to a typed *predicate*::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "run.jsonl.gz", "digest": {"sha256": "…"}}],
     "predicateType": "…", "predicate": {…}}

The portal's predicate types (type identifiers, not fetched):

* :data:`RUN_CERTIFICATE_PREDICATE` — a divergence certificate of an uploaded run log;
* :data:`FIDELITY_REPORT_PREDICATE` — a fidelity audit of an uploaded run log;
* :data:`TEST_RESULT_PREDICATE` — in-toto's Test Result predicate v0.1 for a kernel conformance run
  (``result`` PASSED | WARNED | FAILED, ``configuration`` = the contract versions run, ``passedTests``,
  ``warnedTests``, ``failedTests``).
"""

from __future__ import annotations

import re

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
RUN_CERTIFICATE_PREDICATE = "https://audit-portal.dev/attestation/run-certificate/v1"
FIDELITY_REPORT_PREDICATE = "https://audit-portal.dev/attestation/fidelity-report/v1"
TEST_RESULT_PREDICATE = "https://in-toto.io/attestation/test-result/v0.1"
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class StatementError(ValueError):
    """A payload that is not a well-formed in-toto Statement v1."""


def subject(name: str, sha256: str) -> dict:
    if not SHA256_RE.match(sha256 or ""):
        raise StatementError(f"subject {name!r}: {sha256!r} is not a lowercase hex SHA-256")
    return {"name": name, "digest": {"sha256": sha256}}


def statement(subjects: list[dict], predicate_type: str, predicate: dict) -> dict:
    if not subjects:
        raise StatementError("a statement needs at least one subject")
    return {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": predicate_type, "predicate": predicate}


def check(obj) -> dict:
    """``obj`` if it is a well-formed Statement v1 with sha256 subject digests; :class:`StatementError` if not."""
    if not isinstance(obj, dict):
        raise StatementError("the payload is not a JSON object")
    if obj.get("_type") != STATEMENT_TYPE:
        raise StatementError(f"_type is {obj.get('_type')!r}, not {STATEMENT_TYPE}")
    subjects = obj.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise StatementError("the statement has no subjects")
    for s in subjects:
        digest = s.get("digest") if isinstance(s, dict) else None
        if not isinstance(digest, dict) or not SHA256_RE.match(str(digest.get("sha256", ""))):
            raise StatementError(f"subject {s!r} has no sha256 digest")
    if not isinstance(obj.get("predicateType"), str) or not isinstance(obj.get("predicate"), dict):
        raise StatementError("the statement has no predicateType or predicate")
    return obj
