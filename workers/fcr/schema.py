"""The ``fcr/1`` record's vocabulary (docs/fcr.md#record-fields): the schema tag, the enums of each section, the
log-prob conventions, the issue a check reports, and the small type tests every section check uses.

A record is one JSON object per line, in sections (docs/fcr.md): identity and role (``schema``, ``run_id``,
``trajectory_id``, ``call_id``, ``step``, ``call_index``, ``role``, …); model, tokenizer, engine and sampling;
``prompt``; ``response`` (whose ``token_ids`` fix the length every per-token array must have); ``rollout``
(required) and ``trainer`` (optional) with per-token log-probs, top-K lists, masks and MoE routes. The checks live
by section: :mod:`workers.fcr.sections` (fields), :mod:`workers.fcr.tokens` (per-token lists),
:mod:`workers.fcr.topk` (top-K lists), :mod:`workers.fcr.routes` (MoE routes); :mod:`workers.fcr.validate` runs
them on a record and on a file.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

SCHEMA = "fcr/1"
ROLES = frozenset({"policy", "background", "unknown"})
ROLE_SOURCES = frozenset({"header", "config", "inferred", "default"})
PROMPT_PROVENANCE = frozenset({"engine", "engine_input", "rendered", "retokenized", "missing"})
RESPONSE_PROVENANCE = frozenset({"engine", "engine_token_strings", "retokenized", "missing"})
CONTEXT_EVENTS = frozenset({None, "compaction", "truncation", "retry"})
LOGPROBS_MODES = frozenset({"raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits", None})
GENERATION_CONFIG_SOURCES = frozenset({"request_only", "hf_defaults", "unknown"})
ENGINE_APIS = frozenset({"chat.completions", "completions", "generate", "responses", "messages"})
# docs/fcr.md#rollout-and-trainer: why a rollout log-prob is not the engine's value for that token id
LOGPROB_UNVERIFIED_REASONS = frozenset(
    {
        "placeholder",  # a value the framework wrote where the engine sampled nothing (an appended EOS, a 0.0 default)
        "padded",  # a padding value past what the engine returned
        "not_reported",  # the engine reported no log-prob for the token; the log holds a stand-in
        "reencoded",  # the token ids were re-encoded from text after sampling: the log-prob belonged to another id
        "unaligned",  # the log-probs could not be matched to the ids position by position
    }
)
SENTINEL = -9999.0  # docs/fcr.md#conventions: values ≤ −9999 + 1e-6 are sentinels
SENTINEL_CUT = SENTINEL + 1e-6
POSITIVE_CUT = 1e-6  # R6: a log-prob above this is not a log-probability

# Sets of JSON value types, compared with ``set(map(type, values)) <= T_…``: one C-level pass per list
NoneType = type(None)
T_INT = frozenset({int})
T_NUM = frozenset({int, float})
T_NUM_NULL = frozenset({int, float, NoneType})
T_STR = frozenset({str})
T_LIST = frozenset({list})
STR_OR_NULL = frozenset({str, NoneType})
INT_OR_NULL = frozenset({int, NoneType})
DICT_OR_NULL = frozenset({dict, NoneType})
NUM_OR_NULL = frozenset({int, float, NoneType})


@dataclass(slots=True)
class FcrIssue:
    """One validation finding. ``field`` is a dotted path, e.g. ``rollout.logprobs[3]``."""

    line: int
    call_id: str | None
    field: str
    reason: str
    severity: str = "error"  # "error" | "warning"

    def to_dict(self) -> dict:
        return asdict(self)


def is_int(v) -> bool:
    return type(v) is int  # bool is excluded on purpose


def is_num(v) -> bool:
    return type(v) is int or type(v) is float


def member(v, allowed) -> bool:
    """Enum membership that tolerates unhashable JSON values (lists, dicts)."""
    return (v is None or type(v) is str) and v in allowed


def first_bad(xs, ok) -> int:
    """The index of the first element ``ok`` refuses, or −1: run only once a C-level pass found a problem."""
    for i, x in enumerate(xs):
        if not ok(x):
            return i
    return -1


def ids_sha256(ids) -> str:
    """docs/fcr.md#conventions: SHA-256 of the ids joined by ',' (no spaces)."""
    return hashlib.sha256(",".join(map(str, ids)).encode("ascii")).hexdigest()
