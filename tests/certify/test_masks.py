"""Training masks (docs/masks.md: DPPO, verl, C-DPPO): DPPO's direction rule on the example rows, Top-K divergences
equal the certified lower ends, C-DPPO decides by the upper end and fails closed, verl options behave as
documented."""

import math

import numpy as np
import pytest
import torch

from workers.certify.masks import cdppo_mask, dppo_divergence, dppo_mask, verl_rs_mask
from workers.certify.intervals import tv_interval

L = math.log


def t(x, d=torch.float64):
    return torch.tensor(x, dtype=d)


def test_dppo_example2_rows():
    # rows of docs/intervals.md#worked-example-sampled-token-data-only: (p_y, q_y) = (0.99, 0.80) with A < 0 and (1e-4, 1e-2) with A > 0
    a = t([[L(0.99), L(1e-4)]])
    b = t([[L(0.80), L(1e-2)]])
    adv = t([[-1.0, 1.0]])
    keep = dppo_mask(a, b, adv, 0.15)
    assert keep.tolist() == [[False, True]]  # DPPO masks row 2 (0.19 > 0.15, r < 1), not row 3 (0.0099)
    # GRPO's ratio clip would do the opposite: r = 0.808 is inside [0.8, 1.28], r = 100 is not
    r = torch.exp(b - a)
    assert 0.8 < float(r[0, 0]) < 1.28 and float(r[0, 1]) > 1.28
    # moving back towards r = 1 is never blocked, whatever the divergence
    assert dppo_mask(a, b, -adv, 0.0).tolist() == [[True, True]]


def test_dppo_binary_kl_and_topk_equal_certified_lower_ends():
    rng = np.random.default_rng(0)
    for _ in range(20):
        N, K = 12, 4
        p = rng.dirichlet(np.ones(N))
        q = rng.dirichlet(np.ones(N))
        y = int(rng.choice(N, p=p))
        ids = [int(i) for i in np.argsort(-p)[:K]]
        a, b = t([L(p[y])]), t([L(q[y])])
        D = dppo_divergence(
            a,
            b,
            "topk_tv",
            roll_ids=torch.tensor([ids]),
            roll_topk_logp=t([[L(p[i]) for i in ids]]),
            train_logp_at_roll_ids=t([[L(q[i]) for i in ids]]),
            sampled_id=torch.tensor([y]),
        )
        lo, _ = tv_interval(
            ids, [L(p[i]) for i in ids], ids, [L(q[i]) for i in ids], y, L(p[y]), L(q[y]), topk_caps=False
        )
        assert float(D[0]) == pytest.approx(lo, abs=1e-12)
        true_tv = 0.5 * np.abs(p - q).sum()
        true_kl = float(np.sum(p * np.log(p / q)))
        assert float(D[0]) <= true_tv + 1e-12
        kl = dppo_divergence(
            a,
            b,
            "topk_kl",
            roll_ids=torch.tensor([ids]),
            roll_topk_logp=t([[L(p[i]) for i in ids]]),
            train_logp_at_roll_ids=t([[L(q[i]) for i in ids]]),
            sampled_id=torch.tensor([y]),
        )
        assert float(kl[0]) <= true_kl + 1e-9
        bkl = dppo_divergence(a, b, "binary_kl")
        assert float(bkl[0]) <= true_kl + 1e-12 and float(bkl[0]) <= float(kl[0]) + 1e-12


def example_a_lists():
    """Example A (docs/fcr.md#example-a-a-fully-verifiable-policy-call) as [1, 3, 2] tensors."""
    p_ids = torch.tensor([[[20, 24], [21, 24], [3, 22]]])
    p_lp = t([[[-0.105361, -2.995732], [-0.510826, -1.203973], [-0.01005, -5.298317]]])
    q_ids = p_ids.clone()
    q_lp = t([[[-0.127833, -2.813411], [-0.693147, -0.916291], [-0.01005, -5.115996]]])
    y = torch.tensor([[20, 21, 3]])
    a = t([[-0.105361, -0.510826, -0.01005]])
    b = t([[-0.127833, -0.693147, -0.01005]])
    return p_ids, p_lp, q_ids, q_lp, y, a, b


def test_cdppo_upper_end_decides_and_undetermined_counts_as_outside():
    args = example_a_lists()
    # position 1: TV ∈ [0.10, 0.20], r < 1. With A < 0 the update moves away ⇒ undetermined ⇒ dropped;
    # DPPO's binary TV (0.10 ≤ 0.15) would keep it.
    keep, info = cdppo_mask(*args, t([-1.0]), 0.15, return_info=True)
    assert keep.tolist() == [[True, False, True]]
    assert dppo_mask(args[5], args[6], t([-1.0]), 0.15).tolist() == [[True, True, True]]
    assert info["status"].tolist() == [[0, 2, 0]]
    # with A > 0 position 1 moves back towards r = 1: kept; position 0 (r < 1) too
    assert cdppo_mask(*args, t([1.0]), 0.15).tolist() == [[True, True, True]]
    # the adaptive envelope gives the same decisions here and reports the deciding K; a response mask drops padding
    keep_a, info_a = cdppo_mask(*args, t([-1.0]), 0.15, adaptive=True, return_info=True)
    assert torch.equal(keep_a, keep) and info_a["K_used"].tolist() == [[0, 2, 0]]
    assert cdppo_mask(*args, t([-1.0]), 0.15, adaptive=False, response_mask=torch.tensor([[1, 1, 0]])).tolist() == [
        [True, False, False]
    ]


def test_cdppo_fails_closed_on_bad_data_and_applies_budget_guard():
    p_ids, p_lp, q_ids, q_lp, y, a, b = example_a_lists()
    p_lp = p_lp.clone()
    p_lp[0, 2] = torch.tensor([-5.0, -0.01])  # unsorted list at position 2
    keep, info = cdppo_mask(p_ids, p_lp, q_ids, q_lp, y, a, b, t([1.0]), 0.15, return_info=True)
    assert keep[0, 2].item() is False and info["status"][0, 2].item() == 3
    # budget guard: with a tiny budget no sequence of length 3 with ε̂ = 0.2 survives
    keep = cdppo_mask(*example_a_lists(), t([1.0]), 0.15, budget=1e-3)
    assert not keep.any()
    keep = cdppo_mask(*example_a_lists(), t([1.0]), 0.15, budget=100.0)
    assert keep.all()


def verl_reference(a, b, opt, th):
    """Direct per-sequence computation of one verl option (reference for the vectorised version)."""
    out = []
    for ai, bi in zip(a, b):
        lr = np.clip(np.array(bi) - np.array(ai), -20, 20)
        k = {"k1": -lr, "k2": 0.5 * lr**2, "k3": np.exp(lr) - 1 - lr}[opt[-2:]]
        if opt.startswith("token"):
            vals = list(k)
        else:
            agg = {"seq_sum": np.sum, "seq_mean": np.mean, "seq_max": np.max}[opt[:-3]](k)
            vals = [agg] * len(k)
        if opt.endswith("k1"):
            lo, hi = (float(x) for x in th.split("_")) if "_" in th else (1 / float(th), float(th))
            out.append([math.log(lo) <= v <= math.log(hi) for v in vals])
        else:
            out.append([v <= float(th) for v in vals])
    return out


@pytest.mark.parametrize(
    "opt,th",
    [
        ("token_k1", "0.6_1.6"),
        ("seq_sum_k1", "0.5_2.0"),
        ("seq_mean_k1", "0.999_1.001"),
        ("seq_max_k2", "0.05"),
        ("seq_mean_k3", "0.01"),
        ("token_k3", "0.02"),
        ("seq_sum_k2", "0.1"),
        ("seq_max_k3", "0.05"),
        ("seq_mean_k1", "1.01"),
    ],
)
def test_verl_options_match_reference(opt, th):
    rng = np.random.default_rng(1)
    a = [list(np.log(rng.uniform(0.05, 1, 6))) for _ in range(8)]
    b = [[x + rng.normal(0, 0.15) for x in row] for row in a]
    got = verl_rs_mask(t(a), t(b), torch.ones(8, 6), opt, th)
    assert got.tolist() == verl_reference(a, b, opt, th)


def test_verl_chained_options_are_logical_and():
    rng = np.random.default_rng(2)
    a = t(np.log(rng.uniform(0.05, 1, (5, 7))))
    b = a + t(rng.normal(0, 0.3, (5, 7)))
    m = torch.ones(5, 7)
    both = verl_rs_mask(a, b, m, "token_k1,seq_max_k3", "0.4_1.8,3.0")
    assert torch.equal(both, verl_rs_mask(a, b, m, "token_k1", "0.4_1.8") & verl_rs_mask(a, b, m, "seq_max_k3", "3.0"))
    with pytest.raises(ValueError):
        verl_rs_mask(a, b, m, "seq_max_k1", "2.0")
