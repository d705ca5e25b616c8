"""Every rule and reason code of docs/fidelity-rules.md#rules-r0r9, one behaviour per test."""

from __future__ import annotations


import orjson
import pytest

from workers.fidelity import audit_records

from .conftest import PROMPT_A, TASK_SAY_IT
from .helpers import audit_one, by_id, variant


def spans(c):
    return [(s["start"], s["end"], s["verifiable"], s["reasons"]) for s in c["spans"]]


# ---------------------------------------------------------------------------------------------- R0
def test_r0_misaligned_arrays(A):
    c = audit_one(variant(A, **{"rollout.logprobs": [-0.1, -0.2]}))
    assert c["verdict"] == "excluded" and c["reasons"] == ["MALFORMED"]
    assert c["malformed"][0]["field"] == "rollout.logprobs"
    assert all(v == "n/a" for k, v in c["rules"].items() if k != "R0")


def test_r0_ids_outside_vocabulary_only_with_tokenizer(A, toy):
    rec = variant(A, **{"response.token_ids": [20, 5, 3]})  # 5 is a gap in the toy vocabulary
    assert audit_one(rec)["reasons"] == []  # without the tokenizer the vocabulary check is skipped
    c = audit_one(rec, tokenizer=toy)
    assert c["primary_reason"] == "MALFORMED" and "vocabulary" in c["malformed"][0]["reason"]
    big = variant(A, **{"prompt.token_ids": PROMPT_A + [4000]})
    assert audit_one(big, tokenizer=toy)["primary_reason"] == "MALFORMED"


def test_r0_malformed_record_with_mask_violates(A):
    rec = variant(A, **{"rollout.logprobs": "broken"})
    rep = audit_records([rec])
    assert rep["closed_failure_violations"] == 3 and rep["verdict"] == "FAIL"


def test_r0_duplicate_call_id_keeps_first(A):
    rep = audit_records([A, A])
    first, second = rep["calls"]
    assert first["verdict"] == "verifiable"
    assert second["primary_reason"] == "MALFORMED" and "line 1" in second["malformed"][0]["reason"]


def test_r0_unparseable_lines_fail_closed(A):
    rep = audit_records([orjson.dumps(A), b"{nope", b"[1, 2]"])
    assert [c["primary_reason"] for c in rep["calls"]] == [None, "MALFORMED", "MALFORMED"]
    assert [c["line"] for c in rep["calls"]] == [1, 2, 3]
    assert rep["coverage"]["calls"]["unparsed_lines"] == 2
    assert rep["verdict"] == "FAIL"


# ---------------------------------------------------------------------------------------------- R1
@pytest.mark.parametrize(
    "role,source,purpose,code",
    [
        ("background", "header", "title", "BACKGROUND_CALL"),
        ("unknown", "default", None, "ROLE_UNVERIFIED"),
        ("policy", "default", "main_loop", "ROLE_UNVERIFIED"),
        ("policy", "inferred", "main_loop", "ROLE_UNVERIFIED"),
        ("policy", "header", "retry", "SUPERSEDED_RETRY"),
    ],
)
def test_r1_role(A, role, source, purpose, code):
    rec = variant(
        A, role=role, role_source=source, purpose=purpose, **{"rollout.logprobs": [-0.1, -9999.0, None]}
    )  # later-rule failures are not reported
    c = audit_one(rec)
    assert c["reasons"] == [code] and c["verdict"] == "excluded"
    assert c["rules"]["R1"] == "fail" and c["rules"]["R6"] == "n/a"


def test_r1_config_role_and_inferred_allow_list(A):
    assert audit_one(variant(A, role_source="config"))["reasons"] == []
    assert audit_one(variant(A, role_source="inferred"), allow_inferred_roles=True)["reasons"] == []


def test_r1_background_in_the_loss_is_a_violation(C):
    rec = variant(C, trainer={"logprobs": [-1.1, -0.06], "loss_mask_used": [1, 0]})
    rep = audit_records([rec])
    assert rep["closed_failure_violations"] == 1 and rep["verdict"] == "FAIL"


# ---------------------------------------------------------------------------------------------- R2
@pytest.mark.parametrize(
    "prov,code", [("retokenized", "RESPONSE_IDS_RETOKENIZED"), ("missing", "RESPONSE_IDS_MISSING")]
)
def test_r2_untrusted_response_ids(A, toy, prov, code):
    c = audit_one(variant(A, **{"response.provenance": prov}), tokenizer=toy)
    assert c["primary_reason"] == code and c["verdict"] == "excluded"


def test_r2_retokenized_never_passes_even_if_it_round_trips(A, toy):
    assert toy.encode(toy.decode([20, 21, 3])) == [20, 21, 3]
    assert audit_one(variant(A, **{"response.provenance": "retokenized"}), tokenizer=toy)["verdict"] == "excluded"


def test_r2_engine_token_strings(A, toy):
    good = variant(
        A, **{"response.provenance": "engine_token_strings", "response.token_strings": ["ls", " -la", "<|end|>"]}
    )
    assert audit_one(good, tokenizer=toy)["reasons"] == []
    assert audit_one(good)["primary_reason"] == "R2_NOT_EVALUABLE"  # closed failure without the tokenizer
    for strings, usage in (
        (["ls", " -la", "\ufffd"], 3),
        (["ls", " -l", "<|end|>"], 3),
        (["ls", " -la", "<|end|>"], 4),
        (["ls", " -la"], 3),
    ):
        bad = variant(good, **{"response.token_strings": strings, "response.usage_completion_tokens": usage})
        c = audit_one(bad, tokenizer=toy)
        assert "RESPONSE_IDS_AMBIGUOUS" in c["reasons"] or c["primary_reason"] == "MALFORMED", strings


# ---------------------------------------------------------------------------------------------- R3
@pytest.mark.parametrize(
    "prov,ok",
    [("engine", True), ("engine_input", True), ("rendered", False), ("retokenized", False), ("missing", False)],
)
def test_r3_prompt_provenance(A, prov, ok):
    c = audit_one(variant(A, **{"prompt.provenance": prov}))
    assert (c["reasons"] == []) is ok
    if not ok:
        assert c["reasons"] == ["PROMPT_IDS_UNVERIFIED"]


# ---------------------------------------------------------------------------------------------- R4
def test_r4_token_count(A):
    assert audit_one(variant(A, **{"response.usage_completion_tokens": 4}))["reasons"] == ["TOKEN_COUNT_MISMATCH"]


def test_r4_text_round_trip(A, toy):
    for text, skip, ok in (
        ("ls -la<|end|>", None, True),
        ("ls -la", None, True),
        ("ls -la", True, True),
        ("ls -la", False, False),
        ("ls -l a", None, False),
    ):
        rec = variant(A, **{"response.text": text})
        if skip is not None:
            rec["engine"]["skip_special_tokens"] = skip
        c = audit_one(rec, tokenizer=toy)
        assert (c["reasons"] == []) is ok, (text, skip, c["reasons"])
        if not ok:
            assert c["reasons"] == ["TEXT_ID_MISMATCH"]
    assert audit_one(variant(A, **{"response.text": "ls -la"}))["reasons"] == ["R4_NOT_EVALUABLE"]


# ---------------------------------------------------------------------------------------------- drift
def test_drift_diagnostic(A, toy):
    """Engine sampled HAV|ING? No: H|AV|ING — a non-canonical split; retokenizing the text would give 13,12."""
    rec = variant(
        A,
        **{
            "response.token_ids": [10, 11, 12, 3],
            "response.usage_completion_tokens": 4,
            "rollout.logprobs": [-0.1] * 4,
            "rollout.top_k": KeyError,
            "trainer.logprobs": [-0.1] * 4,
            "trainer.top_k": KeyError,
            "trainer.loss_mask_used": [1] * 4,
        },
    )
    rep = audit_records(
        [A, variant(rec, call_id="tA-1", call_index=1, **{"prompt.token_ids": PROMPT_A + [20, 21, 3]})], tokenizer=toy
    )
    c = by_id(rep)["tA-1"]
    assert c["drift_if_retokenized"] is True and c["verdict"] == "verifiable"  # diagnostic, not a failure
    d = rep["coverage"]["drift"]
    assert d["engine_policy_calls_evaluated"] == 2 and d["calls_drifting_if_retokenized"] == 1
    assert d["token_share"] == pytest.approx(4 / 7)


# ---------------------------------------------------------------------------------------------- R5
def test_r5_root_task_prompt(A):
    assert audit_one(variant(A, **{"prompt.task_prompt_sha256_observed": TASK_SAY_IT}))["reasons"] == [
        "PROMPT_NOT_ORIGINAL"
    ]
    c = audit_one(variant(A, **{"prompt.task_prompt_sha256_declared": None}))
    assert c["reasons"] == ["LINEAGE_UNVERIFIED"] and c["lineage"] == "root-undeclared"


def test_r5_later_calls_and_context_events(A):
    nxt = variant(
        A,
        call_id="tA-1",
        call_index=1,
        **{
            "prompt.token_ids": PROMPT_A + [20, 21, 3, 1, 47, 48, 3, 2],
            "prompt.task_prompt_sha256_declared": None,
            "prompt.task_prompt_sha256_observed": None,
        },
    )
    rewritten = variant(nxt, call_id="tA-2", call_index=2, **{"prompt.token_ids": [0, 33, 3, 1, 47, 3, 2]})
    compacted = variant(
        rewritten,
        call_id="tA-3",
        call_index=3,
        **{"prompt.context_event": "compaction", "prompt.context_source_call_id": "tA-cmp"},
    )
    dangling = variant(compacted, call_id="tA-4", call_index=4, **{"prompt.context_source_call_id": "nowhere"})
    cmp_call = variant(A, call_id="tA-cmp", call_index=5, role="background", purpose="compaction")
    # file order does not matter: the root is found by call_index in the index pass
    rep = audit_records([dangling, compacted, rewritten, nxt, cmp_call, A])
    got = {k: (c["lineage"], c["reasons"]) for k, c in by_id(rep).items()}
    assert got["tA-0"] == ("root-ok", [])
    assert got["tA-1"] == ("prefix-ok", [])
    assert got["tA-2"] == ("unverified", ["LINEAGE_UNVERIFIED"])
    assert got["tA-3"] == ("context-compaction-ok", [])
    assert got["tA-4"] == ("unverified", ["LINEAGE_UNVERIFIED"])


# ---------------------------------------------------------------------------------------------- R6
def test_r6_token_level(A):
    rec = variant(A, **{"rollout.logprobs": [None, 0.5, -9999.0], "rollout.top_k": KeyError})
    c = audit_one(rec)
    assert spans(c) == [
        (0, 1, False, ["LOGPROB_MISSING"]),
        (1, 2, False, ["LOGPROB_NONFINITE"]),
        (2, 3, False, ["SENTINEL_LOGPROB"]),
    ]
    assert c["verdict"] == "excluded"


def test_r6_nonfinite_from_python_json(A):
    line = orjson.dumps(variant(A, **{"rollout.top_k": KeyError})).replace(b"-0.510826", b"NaN", 1)
    c = audit_records([line])["calls"][0]
    assert spans(c) == [(0, 1, True, []), (1, 2, False, ["LOGPROB_NONFINITE"]), (2, 3, True, [])]


def test_r6_sentinel_threshold_is_inclusive_with_tolerance(A):
    rec = variant(
        A,
        **{
            "rollout.logprobs": [-9998.9999995, -9998.99, -0.1],
            "rollout.top_k": KeyError,
            "trainer.logprobs": [-0.1, -0.1, -0.1],
        },
    )
    sp = audit_one(rec)["spans"]
    assert sp[0]["end"] == 1 and "SENTINEL_LOGPROB" in sp[0]["reasons"]
    assert "SENTINEL_LOGPROB" not in sp[1]["reasons"]  # −9998.99 is a (terrible) real log-prob


# ---------------------------------------------------------------------------------------------- R7
@pytest.mark.parametrize(
    "mode,gcs,sampling,ok",
    [
        ("processed_logprobs", "unknown", {"temperature": 0.7}, True),
        ("raw_logprobs", "request_only", {"temperature": 1.0, "top_p": 1.0, "top_k": -1}, True),
        (
            "raw_logprobs",
            "request_only",
            {"temperature": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0},
            True,
        ),
        ("raw_logprobs", "hf_defaults", {"temperature": 1.0}, False),
        ("raw_logprobs", "request_only", {"temperature": 0.7}, False),
        ("raw_logprobs", "request_only", {"top_p": 0.95}, False),
        ("raw_logprobs", "request_only", {"top_k": 20}, False),
        ("raw_logprobs", "request_only", {"presence_penalty": 0.5}, False),
        ("raw_logprobs", "request_only", {"logit_bias_present": True}, False),
        ("raw_logprobs", "request_only", {"structured_output": "json"}, False),
        ("raw_logits", "request_only", {}, False),
        (None, "request_only", {}, False),
    ],
)
def test_r7_semantics(A, mode, gcs, sampling, ok):
    rec = variant(A, sampling=sampling, **{"engine.logprobs_mode": mode, "engine.generation_config_source": gcs})
    c = audit_one(rec)
    assert c["reasons"] == ([] if ok else ["LOGPROB_SEMANTICS_UNVERIFIED"])


def test_r7_topk_inconsistent_is_token_level(A):
    rec = variant(A)
    rec["rollout"]["top_k"][1][0][1] = -0.5109  # 7.4e-5 off: inside the 1e-4 tolerance
    assert audit_one(rec)["reasons"] == []
    rec["rollout"]["top_k"][1][0][1] = -0.52
    assert spans(audit_one(rec)) == [(0, 1, True, []), (1, 2, False, ["TOPK_INCONSISTENT"]), (2, 3, True, [])]
    rec = variant(A)
    rec["rollout"]["top_k"][1] = [[24, -1.2], [7, -2.0]]  # sampled id not listed: nothing to compare
    assert audit_one(rec)["reasons"] == []


# ---------------------------------------------------------------------------------------------- R8
def test_r8_trainer_logprobs(A):
    c = audit_one(variant(A, trainer={"loss_mask_used": [1, 1, 1]}))
    assert c["reasons"] == ["TRAINER_LOGPROB_MISSING"] and c["verdict"] == "excluded"
    c = audit_one(variant(A, **{"trainer.logprobs": [-0.1, None, 0.2]}))
    assert spans(c) == [
        (0, 1, True, []),
        (1, 2, False, ["TRAINER_LOGPROB_MISSING"]),
        (2, 3, False, ["TRAINER_LOGPROB_NONFINITE"]),
    ]


def test_r8_alignment_threshold(A):
    rec = variant(A, **{"trainer.logprobs": [-1.2, -1.7, -0.01005], "trainer.top_k": KeyError})
    c = audit_one(rec)  # |Δ| = 1.094639, 1.189174, 0 → median 1.094639 > τ = 1.0
    assert c["alignment"]["median_abs_diff"] == pytest.approx(1.094639, abs=1e-6)
    assert c["reasons"] == ["TRAINER_MISALIGNED"]
    assert audit_one(rec, tau_align=1.1)["reasons"] == []


def test_r8_staleness_and_versions(A):
    stale = variant(A, **{"trainer.policy_version": 9})
    assert audit_one(stale)["reasons"] == []  # staleness bound off by default
    assert audit_one(stale, max_staleness=1)["reasons"] == ["STALE_ROLLOUT"]
    assert audit_one(stale, max_staleness=2)["reasons"] == []
    assert audit_one(variant(A, **{"model.policy_version": None}), max_staleness=1)["reasons"] == ["R8_NOT_EVALUABLE"]
    mixed = variant(A, **{"rollout.token_policy_versions": [6, 7, 7]})
    assert spans(audit_one(mixed)) == [(0, 1, False, ["MIXED_POLICY_VERSION"]), (1, 3, True, [])]


# ---------------------------------------------------------------------------------------------- R9
def _chain(A, second_prompt, third_prompt):
    p1, r1 = PROMPT_A, [20, 21, 3]
    base = variant(A, **{"trainer.sample_id": "S", "trainer.top_k": KeyError, "rollout.top_k": KeyError})
    c1 = variant(base, call_id="c1", call_index=0)
    c2 = variant(base, call_id="c2", call_index=1, **{"prompt.token_ids": second_prompt(p1 + r1)})
    c3 = variant(base, call_id="c3", call_index=2, **{"prompt.token_ids": third_prompt(c2["prompt"]["token_ids"] + r1)})
    return [c3, c1, c2]  # shuffled on purpose


def test_r9_merged_chain_ok(A):
    recs = _chain(A, lambda s: s + [1, 47, 3, 2], lambda s: s + [1, 44, 3, 2])
    rep = audit_records(recs, mode="merged")
    assert all("PREFIX_CHAIN_BROKEN" not in c["reasons"] for c in rep["calls"])
    assert rep["coverage"]["samples"]["chain_breaks"] == 0 and rep["coverage"]["samples"]["merged_samples"] == 1


def test_r9_break_fails_that_call_and_later_ones(A):
    # c2 re-renders history (drops the trailing <|end|> of c1's response): chain breaks at c2; c3 extends c2 but fails too
    recs = _chain(A, lambda s: s[:-1] + [1, 47, 3, 2], lambda s: s + [1, 44, 3, 2])
    rep = audit_records(recs, mode="merged")
    got = {k: c["reasons"] for k, c in by_id(rep).items()}
    assert "PREFIX_CHAIN_BROKEN" not in got["c1"]
    assert "PREFIX_CHAIN_BROKEN" in got["c2"] and "PREFIX_CHAIN_BROKEN" in got["c3"]
    sites = rep["coverage"]["samples"]["chain_break_sites"]
    assert [s["call_id"] for s in sites] == ["c2"]
    # transition mode does not enforce R9
    rep = audit_records(recs, mode="transition")
    assert all("PREFIX_CHAIN_BROKEN" not in c["reasons"] for c in rep["calls"])
    assert all(c["rules"]["R9"] == "n/a" for c in rep["calls"])


# ---------------------------------------------------------------------------------------------- primary / all
def test_primary_is_first_rule_and_all_reasons_listed(A):
    rec = variant(
        A,
        **{
            "prompt.provenance": "rendered",
            "rollout.logprobs": [-0.105361, -9999.0, -0.01005],
            "response.usage_completion_tokens": 7,
        },
    )
    c = audit_one(rec)
    assert c["primary_reason"] == "PROMPT_IDS_UNVERIFIED"
    assert c["reasons"] == ["PROMPT_IDS_UNVERIFIED", "TOKEN_COUNT_MISMATCH", "SENTINEL_LOGPROB"]
    assert spans(c) == [
        (0, 1, False, ["PROMPT_IDS_UNVERIFIED", "TOKEN_COUNT_MISMATCH"]),
        (1, 2, False, ["PROMPT_IDS_UNVERIFIED", "TOKEN_COUNT_MISMATCH", "SENTINEL_LOGPROB"]),
        (2, 3, False, ["PROMPT_IDS_UNVERIFIED", "TOKEN_COUNT_MISMATCH"]),
    ]


# ---------------------------------------------------------------------------------------------- certificates
def test_certificate_requirements(A, D):
    bad = variant(A)
    bad["rollout"]["top_k"][0].reverse()  # unsorted list → certify flags it
    rep = audit_records([bad])
    assert rep["calls"][0]["reasons"] == []  # reported separately by default
    assert rep["calls"][0]["certificate"]["invalid"] == 1
    c = audit_one(bad, require_certificate=True)
    assert spans(c) == [(0, 1, False, ["CERT_INPUT_INVALID"]), (1, 3, True, [])]
    c = audit_one(variant(D, **{"trainer.loss_mask_used": [1, 1, 0, 1]}), require_certificate=True)
    assert c["reasons"] == ["SENTINEL_LOGPROB", "CERT_MISSING"] and c["verdict"] == "excluded"


def test_trainer_list_need_only_cover_the_rollout_ids(A):
    """trainer.top_k (docs/fcr.md#rollout-and-trainer) must contain the rollout's ids and may add more, in any order; it is not the
    trainer's own top-K, so no cap or order check applies to it (the rollout list keeps both, test above)."""
    rec = variant(A)
    rec["trainer"]["top_k"] = [
        [[24, -2.813411], [20, -0.127833], [25, -4.5]],  # unsorted, one extra id
        [[24, -0.916291], [21, -0.693147]],  # listed token less likely than 21
        [[22, -5.115996], [3, -0.01005]],
    ]
    c = audit_one(rec, require_certificate=True)
    assert c["certificate"]["invalid"] == 0 and c["verdict"] == "verifiable"


# ---------------------------------------------------------------------------------------------- R0 scope
def test_r0_is_structure_only_other_gaps_fail_closed_per_rule(A, toy):
    """R0 (docs/fidelity-rules.md#rules-r0r9) = parses, arrays aligned, ids in the vocabulary. A missing field that no rule needs is a format
    issue, not MALFORMED; a missing field a rule needs fails that rule (<RULE>_NOT_EVALUABLE / unverified)."""
    rec = variant(
        A, source=KeyError, chat_template=KeyError, **{"prompt.ids_sha256": KeyError, "model.served_name": KeyError}
    )
    c = audit_one(rec, tokenizer=toy)
    assert c["verdict"] == "verifiable"
    assert {i["field"] for i in c["format_issues"]} == {
        "source",
        "chat_template",
        "prompt.ids_sha256",
        "model.served_name",
    }
    assert audit_one(variant(A, engine=KeyError))["reasons"] == ["R7_NOT_EVALUABLE"]
    raw = variant(A, sampling=KeyError, **{"engine.logprobs_mode": "raw_logprobs"})
    assert audit_one(raw)["reasons"] == ["R7_NOT_EVALUABLE"]
    c = audit_one(variant(A, trajectory_id=KeyError))
    assert c["reasons"] == ["R5_NOT_EVALUABLE"] and c["lineage"] == "not-evaluable"
    assert audit_one(variant(A, role_source=KeyError))["reasons"] == ["ROLE_UNVERIFIED"]
    assert audit_one(variant(A, **{"response.provenance": KeyError}))["reasons"] == ["R2_NOT_EVALUABLE"]
    assert audit_one(variant(A, **{"prompt.provenance": KeyError}))["reasons"] == ["PROMPT_IDS_UNVERIFIED"]
    assert audit_one(variant(A, **{"response.text": 5}), tokenizer=toy)["reasons"] == ["R4_NOT_EVALUABLE"]
    for critical in (
        {"schema": "fcr/0"},
        {"call_id": KeyError},
        {"response.token_ids": "20,21,3"},
        {"trainer.loss_mask_used": [1, 2, 1]},
        {"rollout.top_k": [[[20]], [], []]},
    ):
        assert audit_one(variant(A, **critical))["primary_reason"] == "MALFORMED", critical


def test_tito_chain_diagnostic_any_mode(A, toy):
    """Turn 2 re-encodes turn 1's answer (H|AV|ING sampled, HAV|ING re-tokenized): not a failure in transition
    mode (R5 only needs the root prefix), but the TITO chain diagnostic and drift report it (docs/fidelity-rules.md#the-prefix-invariant-tito)."""
    t1 = variant(
        A,
        **{
            "response.token_ids": [10, 11, 12, 3],
            "response.usage_completion_tokens": 4,
            "rollout.logprobs": [-0.1] * 4,
            "rollout.top_k": KeyError,
            "trainer.top_k": KeyError,
            "trainer.logprobs": [-0.1] * 4,
            "trainer.loss_mask_used": [1] * 4,
        },
    )
    good2 = variant(
        t1, call_id="tA-1", call_index=1, **{"prompt.token_ids": PROMPT_A + [10, 11, 12, 3, 1, 47, 48, 3, 2]}
    )
    drift2 = variant(
        good2, call_id="tA-2", call_index=2, **{"prompt.token_ids": PROMPT_A + [13, 12, 3, 1, 47, 48, 3, 2]}
    )
    rep = audit_records([drift2, good2, t1], tokenizer=toy)
    c = by_id(rep)
    assert c["tA-0"]["tito_prefix_ok"] is None and c["tA-1"]["tito_prefix_ok"] is True
    assert c["tA-2"]["tito_prefix_ok"] is False  # tA-2 follows tA-1, whose sequence it does not extend
    assert all(x["verdict"] == "verifiable" for x in c.values())
    d = rep["coverage"]["drift"]
    assert (d["tito_checked_calls"], d["tito_chain_breaks"]) == (2, 1)
    assert d["calls_drifting_if_retokenized"] == 3
