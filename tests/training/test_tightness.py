"""Exact tightness study: the enumeration against a brute-force loop, the chain rule and the telescoping identity; every
TRM bound ≥ |J(π_θ) − J(π_roll) − L'| on random pairs (hypothesis), with paper and tight constants."""

import itertools
import math

import torch
from hypothesis import given, settings as hsettings, strategies as st

from workers.training import tightness as TT


def brute_force(roll, theta, R):
    """J(π_roll), J(π_θ), L' and Δ by a plain loop over sequences (independent of the vectorised code)."""
    T, V = len(roll), roll[0].shape[-1]
    J_r = J_t = L = Delta = 0.0
    for n, y in enumerate(itertools.product(range(V), repeat=T)):
        pr = pt = 1.0
        rho = []
        for t in range(T):
            row = sum(y[s] * V ** (t - 1 - s) for s in range(t))
            a = torch.softmax(roll[t][row], -1)[y[t]].item()
            b = torch.softmax(theta[t][row], -1)[y[t]].item()
            pr, pt = pr * a, pt * b
            rho.append(b / a)
        r = float(R[n])
        J_r += pr * r
        J_t += pt * r
        L += pr * r * sum(x - 1 for x in rho)
        Delta += pr * r * sum((rho[t] - 1) * (1 - math.prod(rho[t + 1 :])) for t in range(T))
    return J_r, J_t, L, Delta


def test_enumeration_matches_brute_force_and_identities():
    g = torch.Generator().manual_seed(3)
    roll = TT.random_policy(3, 3, gen=g)
    theta = TT.perturb(roll, "uniform", 0.7, gen=g)
    st_ = TT.exact_pair(roll, theta, reward="random", gen=g)
    J_r, J_t, L, Delta = brute_force(roll, theta, st_["reward"])
    assert math.isclose(st_["J_roll"], J_r, rel_tol=1e-12)
    assert math.isclose(st_["J_theta"], J_t, rel_tol=1e-12)
    assert math.isclose(st_["surrogate"], L, rel_tol=1e-10, abs_tol=1e-14)
    # PDI / telescoping identity (docs/bounds.md#the-bounds): J(π_θ) − J(π_roll) = L' − Δ
    assert math.isclose(J_t - J_r, L - Delta, rel_tol=1e-9, abs_tol=1e-14)
    # chain rule: Σ_t E_{d_t}[KL(c_t)] = KL(P^roll ‖ P^θ) over whole sequences
    assert math.isclose(st_["kl_seq"], st_["kl_seq_direct"], rel_tol=1e-10)
    # plug-in relations (docs/bounds.md#sequence-certificate): D̄_t ≤ ε, D_TV^seq ≤ Σ_t D̄_t (coupling), D_TV^seq ≤ √(D_KL^seq/2) (Pinsker)
    assert max(st_["tv_profile"]) <= st_["eps"] + 1e-15
    assert st_["tv_seq"] <= sum(st_["tv_profile"]) + 1e-12
    assert st_["tv_seq"] <= math.sqrt(st_["kl_seq"] / 2) + 1e-12


def test_adversarial_reward_gain_equals_sequence_tv():
    g = torch.Generator().manual_seed(5)
    roll = TT.random_policy(4, 3, gen=g)
    theta = TT.perturb(roll, "spike", 3.0, gen=g, frac=0.3)
    s = TT.exact_pair(roll, theta, reward="adversarial")
    assert math.isclose(s["J_theta"] - s["J_roll"], s["tv_seq"], rel_tol=1e-12)


@hsettings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**20),
    V=st.integers(2, 4),
    T=st.integers(1, 4),
    kind=st.sampled_from(["uniform", "spike"]),
    size=st.floats(1e-3, 8.0),
    frac=st.floats(0.01, 1.0),
    scale=st.floats(0.1, 4.0),
    reward=st.sampled_from(["random", "count", "adversarial"]),
)
def test_every_bound_holds_on_random_pairs(seed, V, T, kind, size, frac, scale, reward):
    g = torch.Generator().manual_seed(seed)
    roll = TT.random_policy(V, T, gen=g, scale=scale)
    theta = TT.perturb(roll, kind, size, gen=g, frac=frac)
    s = TT.exact_pair(roll, theta, reward=reward, gen=g)
    err = abs(s["error"])
    for constants in ("paper", "tight"):
        b = TT.bounds_for(s, constants)
        for bid, v in b.items():
            if bid == "argmin":
                continue
            assert v >= err - 1e-12, (constants, bid, v, err)


def test_sweep_reports_and_concentration_effect():
    r = TT.sweep(V=4, T=4, sizes=[0.05, 0.5], spike_sizes=[0.5, 4.0], fracs=(0.05,), constants="tight")
    assert r["all_hold"] and len(r["rows"]) == 4
    for row in r["rows"]:
        assert row["bounds"]["best"] <= row["bounds"]["classical_tv"] + 1e-15
        assert row["bounds"]["best"] >= row["abs_error"]


def test_cli_tightness_writes_json_and_figure(tmp_path, capsys):
    import json

    from workers.training.cli import main

    assert main(["tightness", "--V", "3", "--T", "3", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "tightness.json").read_text())
    assert res["paper"]["all_hold"] and res["tight"]["all_hold"]
    assert (tmp_path / "tightness.html").stat().st_size > 1000
    fig = json.loads((tmp_path / "tightness_figure.json").read_text())
    assert any(tr.get("name") == "|exact error|" for tr in fig["data"])
    assert "all bounds hold: True" in capsys.readouterr().out
