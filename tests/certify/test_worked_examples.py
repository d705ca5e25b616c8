"""The worked examples of docs/intervals.md (five-token vocabulary, sampled-token rows) and docs/bounds.md (the paper's
table, four tokens by hand) at 1e-9 relative, plus the numbers printed in the TRM paper."""

import math

import pytest
import torch

from workers.certify import budget_threshold, simplified_bounds, trm_bounds
from workers.certify.estimators import sampled_estimates
from workers.certify.intervals import kl_bounds, tv_interval, tv_interval_fullq, tv_interval_topk

L = math.log
REL = 1e-9
P = [0.50, 0.25, 0.15, 0.07, 0.03]
Q = [0.40, 0.10, 0.10, 0.05, 0.35]


def close(x, y, rel=REL):
    return x == pytest.approx(y, rel=rel, abs=1e-12)


def t(x, dtype=torch.float64):
    return torch.tensor(x, dtype=dtype)


def test_example1a_topk_lists_with_different_ids():
    lo, hi = tv_interval([0, 1], [L(0.5), L(0.25)], [0, 4], [L(0.4), L(0.35)], 2, L(0.15), L(0.10))
    assert close(lo, 0.25) and close(hi, 0.50)
    assert lo <= 0.32 <= hi  # exact TV of the example
    kl_lo, kl_hi = kl_bounds(
        t([[0, 1]], torch.int64),
        t([[L(0.5), L(0.25)]]),
        t([[0, 4]], torch.int64),
        t([[L(0.4), L(0.35)]]),
        t([2], torch.int64),
        t([L(0.15)]),
        t([L(0.10)]),
    )
    assert close(float(kl_lo[0]), 0.125)  # Pinsker 2·0.25² beats the coarsened 0.0475553115
    assert math.isinf(float(kl_hi[0]))


def test_example1a_coarsened_kl_value():
    # Without the Pinsker term the coarsening bound is 0.0475553115 (lists give B = {0, 2}).
    pB = [0.5, 0.15]
    qB = [0.4, 0.10]
    coarse = sum(p * L(p / q) for p, q in zip(pB, qB)) + 0.35 * L(0.35 / 0.5)
    assert close(coarse, 0.0475553115, rel=1e-8)


def test_example1b_sampled_only():
    lo, hi = tv_interval([], [], [], [], 2, L(0.15), L(0.10))
    assert close(lo, 0.05) and close(hi, 0.90)
    est = sampled_estimates(t([L(0.15)]), t([L(0.10)]))
    assert close(float(est["bin_kl"][0]), 0.0122351145, rel=1e-8)


def test_example1c_dppo_topk_is_lower_end():
    # trainer evaluated on the engine ids {0, 1, 2}: arbitrary subset for the trainer ⇒ no caps
    lo, hi = tv_interval([0, 1], [L(0.5), L(0.25)], [0, 1], [L(0.4), L(0.1)], 2, L(0.15), L(0.10), topk_caps=False)
    assert close(lo, 0.30) and close(hi, 0.40)
    r = tv_interval_topk(
        t([[0, 1]], torch.int64),
        t([[L(0.5), L(0.25)]]),
        t([[0, 1]], torch.int64),
        t([[L(0.4), L(0.1)]]),
        t([2], torch.int64),
        t([L(0.15)]),
        t([L(0.10)]),
        caps=False,
    )
    # DPPO Top-K KL = Σ_B p log(p/q) + p_W log(p_W/q_W) = 0.2628347887 (the coarsened bound; Pinsker 0.18 is lower)
    assert close(float(r.kl_lo[0]), 0.2628347887, rel=1e-8)


def test_example1d_trainer_fully_known():
    r = tv_interval_fullq(
        t([[0, 1]], torch.int64),
        t([[L(0.5), L(0.25)]]),
        t([[L(x) for x in Q]]),
        t([2], torch.int64),
        t([L(0.15)]),
        exact_hi=True,
    )
    assert close(float(r["lo"][0]), 0.30) and close(float(r["hi"][0]), 0.35)
    assert close(float(r["kl_lo"][0]), 0.2628347887, rel=1e-8)
    assert close(float(r["kl_hi"][0]), 0.4707789429, rel=1e-8)
    exact_kl = sum(p * L(p / q) for p, q in zip(P, Q))
    assert close(exact_kl, 0.3513152082, rel=1e-8)
    assert float(r["kl_lo"][0]) <= exact_kl <= float(r["kl_hi"][0])


EX2 = [  # p_y, q_y, rho, log rho, k1, k2, k3, ½|ρ−1|, bin-TV, TV upper, bin-KL (docs/intervals.md#worked-example-sampled-token-data-only; 6 significant digits)
    (0.10, 0.09, 0.9, -0.105361, 0.105361, 0.005550, 0.005361, 0.05, 0.01, 0.91, 0.000591),
    (0.99, 0.80, 0.808081, -0.213093, 0.213093, 0.022704, 0.021174, 0.095960, 0.19, 0.20, 0.181005),
    (1e-4, 1e-2, 100, 4.605170, -4.605170, 10.603796, 94.394830, 49.5, 0.0099, 0.9999, 0.009489),
    (0.90, 0.001, 0.001111, -6.802395, 6.802395, 23.136287, 5.803506, 0.499444, 0.899, 0.999, 5.891997),
]


@pytest.mark.parametrize("row", EX2)
def test_example2_sampled_estimators(row):
    py, qy, rho, logrho, k1, k2, k3, tvhat, bintv, tvup, binkl = row
    e = {k: float(v[0]) for k, v in sampled_estimates(t([L(py)]), t([L(qy)])).items()}
    # the table is printed to 6 significant digits; the exact identities are checked at 1e-12 below
    for name, want in [
        ("k1", k1),
        ("k2", k2),
        ("k3", k3),
        ("tv_hat", tvhat),
        ("bin_tv", bintv),
        ("tv_hi", tvup),
        ("bin_kl", binkl),
        ("tv_lo", bintv),
    ]:
        assert e[name] == pytest.approx(want, rel=2e-5, abs=2e-6), name
    lr = L(qy) - L(py)
    assert close(e["k1"], -lr) and close(e["k2"], 0.5 * lr * lr) and close(e["k3"], math.exp(lr) - 1 - lr)
    assert close(e["tv_hi"], 1 - min(py, qy)) and close(e["bin_tv"], abs(py - qy))


def test_example2_k_table_and_decisions():
    def k3(r):
        return r - 1 - math.log(r)

    assert round(k3(0.5), 2) == 0.19 and round(k3(2), 2) == 0.31 and round(k3(10), 2) == 6.70
    assert round(k3(100), 1) == 94.4 and round(k3(0.01), 1) == 3.6
    e = sampled_estimates(t([L(1e-4), L(1e-2)]), t([L(1e-2), L(1e-4)]))
    assert close(float(e["k2"][0]), float(e["k2"][1]))  # k2(100) = k2(0.01)
    # row 2: certificate says TV ∈ [0.19, 0.20]
    lo, hi = tv_interval([], [], [], [], 7, L(0.99), L(0.80))
    assert close(lo, 0.19) and close(hi, 0.20)


KL_ONLY = dict(eps=math.sqrt(1e-4 / 2), delta=1e-4, kl_seq=0.01, tv_seq=math.sqrt(0.005))
KL_TV = dict(eps=5e-3, delta=1e-4, kl_seq=0.01, tv_seq=0.05)
TABLE = {  # docs/bounds.md#worked-example-the-papers-table: exact sums, paper constants (4-decimal print ⇒ compared at 5e-9 absolute on 4-decimal values)
    "classical_tv": (1677.3120, 838.6560),
    "classical_kl": (1677.3120, 1677.3120),
    "coup": (113.8382, 79.9100),
    "pm_kl": (34.9461, 34.9461),
    "pm_tv": (34.9461, 24.7106),
    "mix_kl": (8.1920, 8.1920),
    "mix_tv": (8.1920, 4.0960),
    "adap_star": (34.9461, 24.7106),
    "adap_kl": (34.9461, 24.7106),
    "adap_tv": (113.8382, 79.9100),
    "linear": (115.8524, 81.9200),
}


@pytest.mark.parametrize("case", [0, 1])
def test_example3_paper_table(case):
    inputs = (KL_ONLY, KL_TV)[case]
    T = 4096
    b = trm_bounds(T, **inputs, tv_profile=[inputs["eps"]] * T)
    for key, vals in TABLE.items():
        assert round(b[key], 4) == pytest.approx(vals[case], abs=1e-9), key
    assert close(b["best"], (8.192, 4.096)[case])
    assert b["argmin"] in (("mix_kl", "mix_tv"), ("mix_tv",))[case]


def test_example3_exact_closed_forms():
    T = 4096
    b = trm_bounds(T, **KL_TV, tv_profile=[5e-3] * T)
    assert close(b["classical_tv"], 2 * T * (T - 1) * 25e-6)
    assert close(b["coup"], 4 * 5e-3 * (0.005 * 200 * 201 / 2 + 3895))  # S_lin detail: m' = 200, 3995.5
    assert close(b["mix_kl"], 2 * T * math.sqrt(1e-4 * 0.01)) and close(b["mix_tv"], 4 * T * 5e-3 * 0.05)
    assert b["adap_star"] == pytest.approx(24.710577, abs=5e-7)
    s = simplified_bounds(T, eps=5e-3, delta=1e-4)
    assert round(s["pm_kl"], 4) == 34.9525 and round(s["pm_tv"], 4) == 24.7152
    # the simplified forms upper-bound the exact sums in the small-divergence regime
    assert s["pm_kl"] >= b["pm_kl"] and s["pm_tv"] >= b["pm_tv"]
    assert round(b["classical_tv"] / b["best"]) == 205 and round(1677.312 / 4.096) == 409


def test_example3_large_divergence_and_worst_case():
    T = 4096
    b = trm_bounds(T, delta=1.0, kl_seq=1.0, eps=math.sqrt(0.5))
    assert round(b["classical_kl"] / 1e7, 4) == 1.6773
    assert round(b["linear"], 2) == 11585.24
    assert round(b["pm_kl"], 2) == 11581.58
    assert round(simplified_bounds(T, delta=1.0)["pm_kl"], 1) == 349525.3
    assert close(b["mix_kl"], 8192.0)
    w = trm_bounds(T, delta=0.01, tv_profile=[math.sqrt(0.005)] * T)
    assert round(w["adap_kl"], 3) == 1139.522 and close(w["adap_kl"], w["pm_kl"])


def test_example5_hand_checkable_T4():
    tv = [0.01, 0.02, 0.005, 0.01]
    kl = [2e-4, 8e-4, 5e-5, 2e-4]
    eps, delta, kl_seq = max(tv), max(kl), sum(kl)
    tv_seq = min(1, sum(tv), math.sqrt(kl_seq / 2))
    assert close(tv_seq, 0.025)
    b = trm_bounds(4, eps=eps, delta=delta, kl_seq=kl_seq, tv_seq=tv_seq, tv_profile=tv)
    assert close(b["classical_tv"], 0.0096) and close(b["classical_kl"], 0.0096)
    assert b["pm_kl"] == pytest.approx(0.00663402, abs=5e-9) and close(b["pm_kl"], b["pm_tv"])
    assert close(b["mix_kl"], 0.008) and close(b["mix_tv"], 0.008)
    assert close(b["coup"], 0.0096) and close(b["adap_tv"], 0.006)
    by_hand = 4 * (
        0.01 * min(1, 0.06, math.sqrt(3 * 8e-4 / 2))
        + 0.02 * min(1, 0.04, math.sqrt(2 * 8e-4 / 2))
        + 0.005 * min(1, 0.02, math.sqrt(8e-4 / 2))
    )
    assert close(b["adap_star"], by_hand) and close(b["adap_kl"], by_hand)
    assert b["adap_star"] == pytest.approx(0.00404838, abs=5e-9)
    assert close(b["best"], by_hand) and b["argmin"] in ("adap_kl", "adap_star")


def test_tight_constants_halve_every_bound_and_reward_range_scales():
    T = 512
    kw = dict(eps=1e-3, delta=1e-5, kl_seq=1e-3, tv_seq=0.01, tv_profile=[1e-3] * T)
    paper = trm_bounds(T, **kw)
    tight = trm_bounds(T, **kw, constants="tight")
    scaled = trm_bounds(T, **kw, reward_range=3.0)
    for k in paper:
        if k != "argmin":
            assert close(tight[k], paper[k] / 2) and close(scaled[k], 3 * paper[k]), k
    # docs/bounds.md#budget-inversion: linear-in-δ thresholds double, quadratic-in-ε thresholds grow by √2
    assert close(
        budget_threshold("classical_kl", T, 0.1, constants="tight"),
        2 * budget_threshold("classical_kl", T, 0.1),
        rel=1e-9,
    )
    assert close(
        budget_threshold("classical_tv", T, 0.1, constants="tight"),
        math.sqrt(2) * budget_threshold("classical_tv", T, 0.1),
        rel=1e-9,
    )
