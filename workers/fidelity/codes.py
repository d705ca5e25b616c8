"""The audit's reason codes (docs/fidelity-rules.md#rules-r0r9) and the bit words they live in.

Every reason code owns one bit of a ``uint32`` per response position; the bits are allocated in rule order, so the
*primary* reason of a call is its lowest set bit and the reasons of a span are listed in rule order. Call-level
failures set their bit on every position (:func:`fail_all`); token-level failures only where they occur
(:func:`fail_at`). A position is *verifiable* iff its word is 0 (docs/fidelity-rules.md#definitions); spans are
maximal runs of equal words. numpy only: the web tier reads the codes from here.
"""

from __future__ import annotations

import numpy as np

REASONS: list[tuple[str, str]] = [
    ("R0", "MALFORMED"),
    ("R1", "BACKGROUND_CALL"),
    ("R1", "ROLE_UNVERIFIED"),
    ("R1", "SUPERSEDED_RETRY"),
    ("R2", "RESPONSE_IDS_RETOKENIZED"),
    ("R2", "RESPONSE_IDS_AMBIGUOUS"),
    ("R2", "RESPONSE_IDS_MISSING"),
    ("R2", "R2_NOT_EVALUABLE"),
    ("R3", "PROMPT_IDS_UNVERIFIED"),
    ("R4", "TOKEN_COUNT_MISMATCH"),
    ("R4", "TEXT_ID_MISMATCH"),
    ("R4", "R4_NOT_EVALUABLE"),
    ("R5", "PROMPT_NOT_ORIGINAL"),
    ("R5", "LINEAGE_UNVERIFIED"),
    ("R5", "R5_NOT_EVALUABLE"),
    ("R6", "LOGPROB_MISSING"),
    ("R6", "LOGPROB_NONFINITE"),
    ("R6", "SENTINEL_LOGPROB"),
    ("R6", "LOGPROB_UNVERIFIED"),
    ("R7", "LOGPROB_SEMANTICS_UNVERIFIED"),
    ("R7", "TOPK_INCONSISTENT"),
    ("R7", "R7_NOT_EVALUABLE"),
    ("R8", "TRAINER_LOGPROB_MISSING"),
    ("R8", "TRAINER_LOGPROB_NONFINITE"),
    ("R8", "TRAINER_MISALIGNED"),
    ("R8", "STALE_ROLLOUT"),
    ("R8", "MIXED_POLICY_VERSION"),
    ("R8", "R8_NOT_EVALUABLE"),
    ("R9", "PREFIX_CHAIN_BROKEN"),
    ("CERT", "CERT_MISSING"),
    ("CERT", "CERT_INPUT_INVALID"),
]
CODES = [c for _, c in REASONS]
BIT = {c: np.uint32(1 << i) for i, c in enumerate(CODES)}
RULE_OF = {c: r for r, c in REASONS}
RULES = ["R0", "R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9"]
assert len(CODES) <= 32


# R0 ("parses; arrays aligned; ids within vocab size", docs/fidelity-rules.md#rules-r0r9): the record object, its
# version, its identity and the
# per-token arrays. Any other validator error (e.g. a missing ``source``) does not make the call MALFORMED.
_CRITICAL_EXACT = frozenset({"", "schema", "call_id", "prompt", "response", "rollout", "trainer"})
_CRITICAL_ARRAYS = (
    "prompt.token_ids",
    "response.token_ids",
    "response.token_strings",
    "rollout.logprobs",
    "rollout.top_k",
    "rollout.token_policy_versions",
    "rollout.logprob_unverified",
    "trainer.logprobs",
    "trainer.top_k",
    "trainer.loss_mask_used",
)


def is_critical(field: str) -> bool:
    if field in _CRITICAL_EXACT:
        return True
    return any(field == a or field.startswith(a + "[") for a in _CRITICAL_ARRAYS)


def codes_of(word: int) -> list[str]:
    """Reason codes of a bit word, in rule order."""
    w = int(word)
    return [c for i, c in enumerate(CODES) if w >> i & 1]


def fail_all(result, code: str) -> None:
    """A call-level failure: ``code``'s bit on every position of ``result`` (a :class:`~workers.fidelity.rules.
    CallResult`; with no positions, in its ``call_codes``, so an empty call is never counted verifiable), and its
    rule marked failed."""
    result.words[:] |= BIT[code]
    if not len(result.words):  # a call with no response tokens: its failures are call-level codes
        result.call_codes |= int(BIT[code])
    result.entry["rules"][RULE_OF[code]] = "fail"


def fail_at(result, code: str, where: np.ndarray) -> None:
    """A token-level failure: ``code``'s bit at the positions ``where`` (a bool mask), if any."""
    if where.any():
        result.words[where] |= BIT[code]
        result.entry["rules"][RULE_OF[code]] = "fail"


def spans_of(words: np.ndarray) -> list[dict]:
    n = len(words)
    if n == 0:
        return []
    cuts = np.flatnonzero(words[1:] != words[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [n]))
    return [
        {"start": int(s), "end": int(e), "verifiable": bool(words[s] == 0), "reasons": codes_of(words[s])}
        for s, e in zip(starts, ends)
    ]
