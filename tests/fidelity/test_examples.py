"""The worked examples A, C (and C′), D of docs/fcr.md — the exact expected values documented there."""

from __future__ import annotations

import pytest

from workers.fidelity import audit_records

from .conftest import TOY_SHA
from .helpers import by_id, variant


def test_toy_tokenizer_identity(toy):
    assert toy.sha256 == TOY_SHA
    assert toy.encode("HAVING<|end|>") == [13, 12, 3]
    assert toy.decode([10, 11, 12, 3]) == "HAVING<|end|>"
    assert toy.encode("ls -la<|end|>") == [20, 21, 3]


def test_example_a(A, toy):
    rep = audit_records([A], tokenizer=toy)
    c = rep["calls"][0]
    assert c["verdict"] == "verifiable"
    assert c["spans"] == [{"start": 0, "end": 3, "verifiable": True, "reasons": []}]
    assert c["primary_reason"] is None and c["reasons"] == []
    assert c["lineage"] == "root-ok"
    assert c["drift_if_retokenized"] is False
    assert c["alignment"]["median_abs_diff"] == pytest.approx(0.022472, abs=1e-6)
    cert = c["certificate"]
    assert cert["lo"] == pytest.approx([0.0200, 0.1000, 0.0010], abs=1e-4)
    assert cert["hi"] == pytest.approx([0.0700, 0.2000, 0.0050], abs=1e-4)
    assert cert["gap"] == pytest.approx([0.05, 0.10, 0.004], abs=1e-4)
    assert cert["binary_tv"] == pytest.approx([0.0200, 0.1000, 0.0000], abs=1e-4)
    assert cert["decision"] == ["inside", "undecided", "inside"]
    assert rep["verdict"] == "PASS" and rep["closed_failure_violations"] == 0
    assert rep["coverage"]["policy_tokens"] == 3 and rep["coverage"]["verifiable_policy_tokens"] == 3


def test_example_c_background(A, C, toy):
    rep = audit_records([A, C], tokenizer=toy)
    c = by_id(rep)["tA-bg-1"]
    assert c["verdict"] == "excluded" and c["verifiable_tokens"] == 0 and c["n_tokens"] == 2
    assert c["primary_reason"] == "BACKGROUND_CALL" and c["reasons"] == ["BACKGROUND_CALL"]
    assert all(c["rules"][r] == "n/a" for r in ("R2", "R3", "R4", "R5", "R6", "R7", "R8"))
    cov = rep["coverage"]
    assert cov["background_ledger"] == {"background:title": {"calls": 1, "tokens": 2}}
    assert cov["policy_tokens"] == 3  # not in the policy-token denominator
    assert rep["closed_failure_violations"] == 0 and rep["verdict"] == "PASS"
    assert cov["calls"]["spurious_call_rate"] == 0


def test_example_c_prime_undeclared(A, C, toy):
    c2 = variant(C, role="unknown", role_source="default", inferred_purpose="title", purpose=KeyError)
    rep = audit_records([A, c2], tokenizer=toy)
    c = by_id(rep)["tA-bg-1"]
    assert c["verdict"] == "excluded" and c["primary_reason"] == "ROLE_UNVERIFIED"
    assert rep["coverage"]["calls"]["spurious_call_rate"] == pytest.approx(0.5)
    assert rep["coverage"]["background_ledger"] == {"unknown:title": {"calls": 1, "tokens": 2}}
    assert any("negotiated protocol" in w for w in rep["protocol_warnings"])


def test_example_d_partial_and_closed_failure(D, toy):
    rep = audit_records([D], tokenizer=toy)
    c = rep["calls"][0]
    assert c["verdict"] == "partial"
    assert [(s["start"], s["end"], s["verifiable"], s["reasons"]) for s in c["spans"]] == [
        (0, 2, True, []),
        (2, 3, False, ["SENTINEL_LOGPROB"]),
        (3, 4, True, []),
    ]
    assert c["alignment"]["median_abs_diff"] == pytest.approx(0.01, abs=1e-9)
    assert c["closed_failure_violations"] == 1
    assert rep["closed_failure_violations"] == 1 and rep["verdict"] == "FAIL"


def test_example_d_with_a_correct_mask_passes(D, toy):
    fixed = variant(D, **{"trainer.loss_mask_used": [1, 1, 0, 1]})
    rep = audit_records([fixed], tokenizer=toy)
    assert rep["closed_failure_violations"] == 0 and rep["verdict"] == "PASS"


def test_examples_together(A, C, D, toy):
    rep = audit_records([D, C, A], tokenizer=toy)
    cov = rep["coverage"]
    assert cov["policy_tokens"] == 7 and cov["verifiable_policy_tokens"] == 6
    assert cov["calls"]["by_role"]["policy"] == {"verifiable": 1, "partial": 1, "excluded": 0}
    assert cov["excluded_policy_tokens_by_primary_reason"] == {"SENTINEL_LOGPROB": 1}
    assert cov["trajectories"]["fully_verifiable"] == 1 and cov["trajectories"]["partially_verifiable"] == 1
    assert cov["trajectories"]["min_coverage"] == pytest.approx(0.75)
    assert rep["verdict"] == "FAIL"
