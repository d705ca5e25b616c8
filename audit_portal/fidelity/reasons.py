"""Each fidelity exclusion reason in one plain sentence, shown beside its code (the code stays: it is what the API
filters on and what docs/fidelity.md explains in full). The codes are the engine's (workers/fidelity/rules.py);
tests/portal/fidelity/test_reason_sentences.py fails when a code has no sentence."""

from __future__ import annotations

REASON_SENTENCES = {
    "MALFORMED": "The record is not well formed (structure, array lengths or token ids), so nothing in it can be trusted.",
    "BACKGROUND_CALL": "A background model call (a helper, not the policy): kept out of the loss.",
    "ROLE_UNVERIFIED": "The call is not declared as a policy call by a header or the configuration.",
    "SUPERSEDED_RETRY": "A retry: a later call replaced it.",
    "RESPONSE_IDS_RETOKENIZED": "The response ids were rebuilt from text, not taken from the engine.",
    "RESPONSE_IDS_AMBIGUOUS": "The engine's token strings do not map back to one id each.",
    "RESPONSE_IDS_MISSING": "The log has no response token ids.",
    "R2_NOT_EVALUABLE": "Where the response ids came from cannot be checked (unknown source, or no registered "
    "tokenizer).",
    "PROMPT_IDS_UNVERIFIED": "The prompt ids are not the ones the engine received.",
    "TOKEN_COUNT_MISMATCH": "The engine's completion-token count differs from the number of response ids.",
    "TEXT_ID_MISMATCH": "The response text does not decode from the response ids.",
    "R4_NOT_EVALUABLE": "The text cannot be checked against the ids (no registered tokenizer, or text not a string).",
    "PROMPT_NOT_ORIGINAL": "The prompt is not the task's original prompt.",
    "LINEAGE_UNVERIFIED": "The call cannot be traced back to its task's original prompt.",
    "R5_NOT_EVALUABLE": "The call has no trajectory id or call index, so its lineage cannot be checked.",
    "LOGPROB_MISSING": "The rollout log-probability of the token is missing.",
    "LOGPROB_NONFINITE": "The rollout log-probability is not a valid log-probability (NaN, infinite or positive).",
    "SENTINEL_LOGPROB": "The rollout log-probability is a placeholder value (such as −9999), not a measurement.",
    "LOGPROB_UNVERIFIED": "The log-probability cannot be shown to be the engine's for this token (a placeholder, "
    "padding, or ids re-encoded after sampling).",
    "LOGPROB_SEMANTICS_UNVERIFIED": "It is not declared which distribution the log-probabilities come from (before "
    "or after sampling transforms).",
    "TOPK_INCONSISTENT": "The token's log-probability differs from its own entry in the top-K list.",
    "R7_NOT_EVALUABLE": "The engine or its sampling settings are not recorded, so the log-probabilities' meaning "
    "cannot be checked.",
    "TRAINER_LOGPROB_MISSING": "The trainer's log-probability of the token is missing (often: the trainer side was "
    "not joined yet).",
    "TRAINER_LOGPROB_NONFINITE": "The trainer's log-probability is not a valid log-probability.",
    "TRAINER_MISALIGNED": "Trainer and rollout log-probabilities disagree so much that they are probably for "
    "different tokens.",
    "STALE_ROLLOUT": "The rollout came from a policy older than the allowed staleness.",
    "MIXED_POLICY_VERSION": "These tokens were sampled by an earlier policy version than the rest of the call, or "
    "by a version the log does not name (a partial rollout across weight updates).",
    "R8_NOT_EVALUABLE": "A policy version needed for the staleness check is missing.",
    "PREFIX_CHAIN_BROKEN": "This turn does not extend the previous one, so the merged sample is not one rollout.",
    "CERT_MISSING": "No top-K lists to certify the token's divergence, and this audit requires a certificate.",
    "CERT_INPUT_INVALID": "The top-K lists cannot be used for a certificate (unsorted, duplicated or inconsistent "
    "entries).",
}


def reason_sentence(code) -> str:
    """The sentence for ``code``; an unknown code (a newer engine) says so instead of nothing."""
    return REASON_SENTENCES.get(str(code), "A reason this portal does not describe yet; see docs/fidelity.md.")
