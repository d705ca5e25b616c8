"""Exact enumeration oracle (docs/bounds.md#the-bounds): for tiny policy pairs (vocabulary ≤ 4, T ≤ 6) compute the
surrogate error J(π_θ) − J(π_roll) − L'(π_θ), L' = E_roll[R·Σ_t(ρ_t − 1)], by enumerating every sequence, and check
that every bound returned by trm_bounds — fed with the exact population quantities ε, δ (max over all reachable
contexts), D_KL^seq, D_TV^seq, D̄_t — holds, with paper and tight constants. Also: the budget inversion is
consistent."""

import itertools
import math

import numpy as np
import pytest

from workers.certify import budget_threshold, trm_bounds


def make_policy_pair(rng, V, T, scale):
    """π_roll(·|prefix) and π_θ(·|prefix) for every prefix of length < T (random, context dependent)."""
    roll, theta = {}, {}
    for t in range(T):
        for prefix in itertools.product(range(V), repeat=t):
            logits = rng.normal(0, 1.5, V)
            roll[prefix] = np.exp(logits) / np.exp(logits).sum()
            pert = logits + rng.normal(0, scale, V) * (rng.uniform() < 0.7)
            theta[prefix] = np.exp(pert) / np.exp(pert).sum()
    return roll, theta


def exact_quantities(roll, theta, R, V, T):
    J_roll = J_theta = L = 0.0
    kl_seq = 0.0
    tv_seq = 0.0
    Dbar = np.zeros(T)
    eps = delta = 0.0
    for prefix, p in roll.items():
        q = theta[prefix]
        eps = max(eps, 0.5 * np.abs(p - q).sum())
        delta = max(delta, float(np.sum(p * np.log(p / q))))
    for y in itertools.product(range(V), repeat=T):
        P_roll = P_theta = 1.0
        rho_sum = 0.0
        for t in range(T):
            p, q = roll[y[:t]], theta[y[:t]]
            P_roll *= p[y[t]]
            P_theta *= q[y[t]]
            rho_sum += q[y[t]] / p[y[t]] - 1.0
        J_roll += P_roll * R[y]
        J_theta += P_theta * R[y]
        L += P_roll * R[y] * rho_sum
        tv_seq += 0.5 * abs(P_roll - P_theta)
    for t in range(T):  # D̄_t and the chain-rule sequence KL: expectations over d_t^roll
        for prefix in itertools.product(range(V), repeat=t):
            w = np.prod([roll[prefix[:s]][prefix[s]] for s in range(t)]) if t else 1.0
            p, q = roll[prefix], theta[prefix]
            Dbar[t] += w * 0.5 * np.abs(p - q).sum()
            kl_seq += w * float(np.sum(p * np.log(p / q)))
    return J_theta - J_roll - L, dict(eps=eps, delta=delta, kl_seq=kl_seq, tv_seq=tv_seq, tv_profile=Dbar)


CASES = [
    (V, T, scale, seed)
    for seed, (V, T, scale) in enumerate(
        [
            (2, 6, 0.3),
            (3, 4, 0.5),
            (4, 3, 1.0),
            (3, 5, 0.1),
            (2, 5, 2.0),
            (4, 4, 0.05),
            (2, 6, 1.0),
            (3, 3, 3.0),
            (2, 4, 0.01),
            (4, 2, 0.7),
        ]
    )
]


@pytest.mark.parametrize("V,T,scale,seed", CASES)
def test_every_bound_holds_on_enumerated_policies(V, T, scale, seed):
    rng = np.random.default_rng(seed)
    roll, theta = make_policy_pair(rng, V, T, scale)
    R = {y: rng.uniform() for y in itertools.product(range(V), repeat=T)}
    error, q = exact_quantities(roll, theta, R, V, T)
    assert (
        q["tv_seq"] <= min(1.0, q["tv_profile"].sum(), math.sqrt(q["kl_seq"] / 2)) + 1e-12
    )  # docs/bounds.md#sequence-certificate
    for constants in ("paper", "tight"):
        b = trm_bounds(T, **q, constants=constants)
        assert set(b) >= {
            "classical_tv",
            "classical_kl",
            "pm_kl",
            "pm_tv",
            "mix_kl",
            "mix_tv",
            "coup",
            "adap_kl",
            "adap_tv",
            "adap_star",
            "linear",
        }
        for key, value in b.items():
            if key != "argmin":
                assert abs(error) <= value + 1e-12, (constants, key, error, value)
        assert b["best"] == min(v for k, v in b.items() if k not in ("best", "argmin"))
    # reward range: R ∈ [0, 3] multiplies the error by 3 and so must the bound
    R3 = {k: 3 * v for k, v in R.items()}
    error3, _ = exact_quantities(roll, theta, R3, V, T)
    assert abs(error3) <= trm_bounds(T, **q, constants="tight", reward_range=3.0)["best"] + 1e-12


@pytest.mark.parametrize("V,T,scale,seed", CASES[:5])
def test_budget_threshold_is_tight_and_consistent(V, T, scale, seed):
    budget = 0.05
    for bid in (
        "classical_tv",
        "classical_kl",
        "pm_kl",
        "pm_tv",
        "mix_kl",
        "mix_tv",
        "coup",
        "adap_kl",
        "adap_tv",
        "adap_star",
        "linear",
    ):
        fixed = {"delta": 1e-3} if bid in ("pm_tv", "adap_star") else {}
        thr = budget_threshold(bid, T, budget, **fixed)
        key = "delta" if bid in ("classical_kl", "pm_kl", "mix_kl", "adap_kl") else "eps"
        if math.isinf(thr) or thr >= 1.0 and key == "eps":
            continue
        kw = {**fixed, key: thr}
        if bid == "mix_kl":
            kw["kl_seq"] = T * thr
        if bid == "mix_tv":
            kw["tv_seq"] = min(1.0, T * thr)
        if bid == "adap_kl":
            kw["tv_profile"] = [min(1.0, math.sqrt(thr / 2))] * T
        assert trm_bounds(T, **kw)[bid] <= budget * (1 + 1e-12)
        kw[key] = thr * (1 + 1e-6)
        if bid == "adap_kl":
            kw["tv_profile"] = [min(1.0, math.sqrt(kw[key] / 2))] * T
        if bid == "mix_kl":
            kw["kl_seq"] = T * kw[key]
        if bid == "mix_tv":
            kw["tv_seq"] = min(1.0, T * kw[key])
        assert trm_bounds(T, **kw)[bid] > budget
