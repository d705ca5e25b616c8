"""Budget inversion (docs/bounds.md#budget-inversion): closed forms in the small-divergence regime, monotonicity in T,
vacuous budgets, and the bound evaluated at the returned threshold sits exactly at the budget."""

import math

import pytest

from workers.certify import budget_threshold, trm_bounds
from workers.certify.bounds import BOUND_IDS, guard_threshold

REL = 1e-9


@pytest.mark.parametrize("T,E", [(64, 0.1), (4096, 0.1), (4096, 1.0), (1000, 0.01)])
def test_closed_forms(T, E):
    assert budget_threshold("classical_kl", T, E) == pytest.approx(E / (T * (T - 1)), rel=REL)
    assert budget_threshold("classical_tv", T, E) == pytest.approx(math.sqrt(E / (2 * T * (T - 1))), rel=REL)
    d = budget_threshold("pm_kl", T, E)
    closed = E / (2 * sum(math.sqrt(k) for k in range(T)))
    if closed <= 2 / (T - 1):
        assert d == pytest.approx(closed, rel=REL)
        assert d >= 3 * E / (4 * T**1.5)  # the paper-simplified value is slightly smaller, also valid
    eps_c = budget_threshold("coup", T, E)
    if T * eps_c <= 1:
        assert eps_c == pytest.approx(math.sqrt(E / (2 * T * (T - 1))), rel=REL)
    assert budget_threshold("linear", T, E) == pytest.approx(E / (4 * T), rel=REL)
    assert budget_threshold("mix_kl", T, E) == pytest.approx(E / (2 * T**1.5), rel=REL)


def test_spec_remark_T4096_budget_01():
    # docs/bounds.md#budget-inversion: at T = 4096 and budget 0.1 a guarantee needs δ ≲ 2.9e-7
    assert budget_threshold("pm_kl", 4096, 0.1) == pytest.approx(2.86e-7, rel=5e-3)


@pytest.mark.parametrize("bid", BOUND_IDS)
def test_monotone_in_T_and_saturation(bid):
    fixed = {"delta": 1e-2} if bid in ("pm_tv", "adap_star") else {}
    ths = [budget_threshold(bid, T, 0.5, **fixed) for T in (8, 64, 512)]
    assert all(x >= y for x, y in zip(ths, ths[1:])), ths
    huge = budget_threshold(bid, 8, 1e9, **fixed)
    assert huge == (math.inf if bid in ("classical_kl", "pm_kl", "mix_kl", "adap_kl") else 1.0)


def test_guard_threshold_is_best_of_family():
    T, E = 2048, 0.2
    eps, via = guard_threshold("tv", T, E)
    assert eps == max(
        budget_threshold(b, T, E) for b in ("classical_tv", "coup", "pm_tv", "mix_tv", "adap_tv", "adap_star", "linear")
    )
    assert via in BOUND_IDS
    delta, via = guard_threshold("kl", T, E)
    assert delta == max(budget_threshold(b, T, E) for b in ("classical_kl", "pm_kl", "mix_kl", "adap_kl"))
    # at the threshold the named bound is within budget (worst-case inputs)
    worst = dict(delta=delta, kl_seq=T * delta, tv_profile=[math.sqrt(delta / 2)] * T)
    assert trm_bounds(T, **worst)[via] <= E * (1 + 1e-12)
