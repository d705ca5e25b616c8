"""The run verdict (workers/certify/verdict.py): each verdict from worked certificates, and the budget inversion it
reports checked against the bounds themselves."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.certify.bounds import trm_bounds
from workers.certify.verdict import LABELS, needed_eps, run_verdict


def summary(sequences=10, certified=10, errors=0, eps=1e-4, T=256, threshold=0.01, acceptance=0.9):
    return {
        "sequences": sequences,
        "sequences_certified": certified,
        "eps_hat": eps,
        "T_ref": T,
        "threshold": threshold,
        "acceptance_rate": acceptance,
        "status_counts": {"sequences": {"DATA_ERROR": errors}},
    }


def test_a_bound_within_budget_is_certified_and_passes():
    v = run_verdict(summary(), {"best": 0.05, "argmin": "coup"}, {"budget": 0.1})
    assert (v.code, v.passed, v.label) == ("certified", True, LABELS["certified"])
    assert "0.05" in v.sentence and "0.1" in v.sentence


def test_above_budget_but_below_the_reward_range_is_over_budget():
    v = run_verdict(summary(), {"best": 0.4}, {"budget": 0.1})
    assert v.code == "over_budget" and not v.passed
    assert "needs every token's TV at most" in v.sentence


def test_a_bound_of_the_reward_range_or_more_says_nothing():
    for best in (1.0, 3.4, 26.0):
        assert run_verdict(summary(), {"best": best}, {"budget": 0.1}).code == "vacuous"
    # a wider reward range makes the same B* meaningful
    assert run_verdict(summary(), {"best": 3.4}, {"budget": 0.1, "reward_range": 10.0}).code == "over_budget"
    assert run_verdict(summary(), {}, {"budget": 0.1}).code == "vacuous"  # no finite bound at all


def test_data_errors_outrank_a_bound_within_budget():
    v = run_verdict(summary(errors=2), {"best": 0.01}, {"budget": 0.1})
    assert v.code == "data_errors" and not v.passed and "2 of 10" in v.sentence


def test_nothing_certified_is_not_verifiable_whatever_the_bound():
    assert run_verdict(summary(certified=0, errors=10), {"best": 0.0}, {}).code == "not_verifiable"
    assert run_verdict(summary(sequences=0, certified=0), {}, {}).code == "not_verifiable"


def test_the_default_budget_applies_when_the_certificate_has_none():
    assert run_verdict(summary(), {"best": 0.05}, {}).budget == 0.1
    assert run_verdict(summary(), {"best": 0.05}, {}, budget=0.01).code == "over_budget"


def test_masking_reports_the_kept_share_and_its_bound():
    v = run_verdict(summary(threshold=1e-4, acceptance=0.75), {"best": 2.0}, {"budget": 0.1})
    assert v.kept_share == 0.75
    assert v.kept_bound == pytest.approx(trm_bounds(256, eps=1e-4)["best"])
    assert "keeps 75% of sequences" in v.sentence


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 8192), budget=st.floats(1e-4, 5.0))
def test_needed_eps_is_the_largest_tv_that_meets_the_budget(T, budget):
    """The inversion, checked against the bounds evaluated directly: at the reported ε some bound is within E, and
    just above it none is."""
    eps = needed_eps(T, budget)
    assert trm_bounds(T, eps=eps)["best"] <= budget * (1 + 1e-9)
    if eps < 1.0:
        above = min(1.0, eps * (1 + 1e-6) + 1e-15)
        assert trm_bounds(T, eps=above)["best"] > budget
    assert 0.0 <= eps <= 1.0 and not math.isnan(eps)


def test_masking_is_offered_only_where_it_lowers_the_bound():
    worst_at_threshold = trm_bounds(256, eps=0.15)["best"]
    v = run_verdict(summary(threshold=0.15, acceptance=0.35), {"best": worst_at_threshold / 2}, {"budget": 0.1})
    assert v.kept_bound == pytest.approx(worst_at_threshold) and "Masking" not in v.sentence
