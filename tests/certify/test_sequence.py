"""Sequence certificates (docs/bounds.md#sequence-certificate): plug-ins, A(y) by hand (the four-token example's
weights), statuses against a brute-force decision, DATA_ERROR propagation, batch bounds, heuristic TRM modes, length
buckets."""

import math

import numpy as np
import pytest
import torch

from workers.certify import budget_threshold, trm_bounds
from workers.certify.masks import verl_rs_mask
from workers.certify.sequence import (
    CERT_IN,
    CERT_OUT,
    DATA_ERROR,
    HEURISTIC,
    UNDETERMINED,
    acceptance_by_length,
    sequence_certificate,
    trm_mask,
)


def f(x):
    return torch.tensor(x, dtype=torch.float64)


def test_example5_sequence_plugins_and_A_y():
    tv = f([[0.01, 0.02, 0.005, 0.01]])
    kl = f([[2e-4, 8e-4, 5e-5, 2e-4]])
    r = sequence_certificate(tv, tv, kl, mode="kl", threshold=1e-3)
    assert float(r["eps_hat"][0]) == 0.02 and float(r["delta_hat"][0]) == 8e-4
    assert float(r["kl_seq"][0]) == pytest.approx(1.25e-3, rel=1e-12)
    assert float(r["tv_seq"][0]) == pytest.approx(0.025, rel=1e-12)
    # A(y) with w_t = min(1, (T−t)ε, √((T−t)δ/2)) is exactly the Example 5 adap_star value for one sequence
    assert float(r["A_y"][0]) == pytest.approx(0.00404838, abs=5e-9)
    b = trm_bounds(4, eps=0.02, delta=8e-4, kl_seq=1.25e-3, tv_seq=0.025, tv_profile=[0.01, 0.02, 0.005, 0.01])
    for k, v in b.items():
        assert r["bounds"][k] == (v if k == "argmin" else pytest.approx(v, rel=1e-12))
    assert r["status"].tolist() == [CERT_IN] and r["accept"].tolist() == [True]


def test_statuses_match_brute_force():
    rng = np.random.default_rng(0)
    B, T = 40, 9
    lo = f(rng.uniform(0, 0.2, (B, T)))
    hi = lo + f(rng.uniform(0, 0.2, (B, T)))
    lengths = rng.integers(1, T + 1, B)
    mask = torch.tensor(np.arange(T)[None, :] < lengths[:, None])
    err = torch.zeros(B, T, dtype=torch.int32)
    err[3, 0] = 4
    err[5, T - 1] = 4  # beyond the mask when lengths[5] < T: must not count
    thr, avg = 0.25, 0.15
    r = sequence_certificate(lo, hi, None, mask, err=err, mode="tv", threshold=thr, avg_threshold=avg)
    for i in range(B):
        n = lengths[i]
        l_, h_ = lo[i, :n].numpy(), hi[i, :n].numpy()
        if i == 3 or (i == 5 and n == T):
            want = DATA_ERROR
        elif h_.max() <= thr and h_.mean() <= avg:
            want = CERT_IN
        elif l_.max() > thr or l_.mean() > avg:
            want = CERT_OUT
        else:
            want = UNDETERMINED
        assert int(r["status"][i]) == want, i
        assert bool(r["accept"][i]) == (want == CERT_IN)
        assert int(r["length"][i]) == n
    assert r["acceptance_rate"] == pytest.approx(float(r["accept"].double().mean()))


def test_kl_mode_fails_closed_when_kl_unbounded_and_budget_threshold():
    tv = f([[0.001, 0.002]])
    r = sequence_certificate(tv, tv, None, mode="kl", threshold=0.05)
    assert r["status"].tolist() == [UNDETERMINED] and not bool(r["accept"][0])
    assert math.isinf(float(r["delta_hat"][0]))
    r = sequence_certificate(tv, tv, None, mode="tv", budget=0.05)
    want = max(
        budget_threshold(b, 2, 0.05, **({"delta": None} if False else {}))
        for b in ("classical_tv", "coup", "mix_tv", "adap_tv", "linear")
    )
    assert r["threshold"] >= want - 1e-15 and r["threshold_source"].startswith("budget")


def test_heuristic_trm_modes_equal_verl_options():
    rng = np.random.default_rng(4)
    a = f(np.log(rng.uniform(0.05, 1, (6, 8))))
    b = a + f(rng.normal(0, 0.2, (6, 8)))
    m = torch.ones(6, 8, dtype=torch.bool)
    m[2, 5:] = False
    acc, st = trm_mask(response_mask=m, mode="k2max", threshold=0.02, logp_roll=a, logp_train=b)
    assert torch.equal(acc, verl_rs_mask(a, b, m, "seq_max_k2", 0.02).any(-1))
    assert set(st.tolist()) == {HEURISTIC}
    acc, _ = trm_mask(response_mask=m, mode="k3mean", threshold=0.01, logp_roll=a, logp_train=b)
    assert torch.equal(acc, verl_rs_mask(a, b, m, "seq_mean_k3", 0.01).any(-1))


def test_acceptance_by_length():
    acc = torch.tensor([True, False, True, True])
    lengths = torch.tensor([10, 64, 65, 9000])
    out = acceptance_by_length(acc, lengths)
    assert out == [
        {"bucket": "<=64", "sequences": 2, "accepted": 1, "acceptance_rate": 0.5},
        {"bucket": "65-128", "sequences": 1, "accepted": 1, "acceptance_rate": 1.0},
        {"bucket": ">8192", "sequences": 1, "accepted": 1, "acceptance_rate": 1.0},
    ]
