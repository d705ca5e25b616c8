"""Losses: gradients against autograd of each method's own objective and finite differences; masks against the
worked examples of docs/intervals.md and against independent restatements of the rules; TRM normalisation
by the total N."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings as hsettings, strategies as st

from workers.training import losses as L

F64 = torch.float64


def case(seed=0, B=3, T=4, V=5, scale=0.8):
    """Tiny policy pair: rollout logits, trainer logits (a leaf), sampled tokens from the rollout policy."""
    g = torch.Generator().manual_seed(seed)
    roll = torch.randn(B, T, V, generator=g, dtype=F64) * 1.5
    train = (roll + scale * torch.randn(B, T, V, generator=g, dtype=F64)).requires_grad_(True)
    y = torch.multinomial(torch.softmax(roll, -1).reshape(B * T, V), 1, generator=g).reshape(B, T)
    adv = torch.randn(B, generator=g, dtype=F64)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[-1, -1] = False
    lp_roll = torch.log_softmax(roll, -1).gather(-1, y[..., None])[..., 0]
    return roll, train, y, adv, mask, lp_roll


def logp_of(train, y):
    return torch.log_softmax(train, -1).gather(-1, y[..., None])[..., 0]


def grad(f, train):
    train.grad = None
    f().backward()
    return train.grad.clone()


def token_mean(x, mask):
    return torch.where(mask, x, torch.zeros_like(x)).sum() / mask.sum()


@pytest.mark.parametrize("seed", range(4))
def test_ppo_gradient_equals_autograd_of_clipped_objective(seed):
    roll, train, y, adv, mask, lp_roll = case(seed)
    A = adv[:, None].expand(mask.shape)

    def ref():
        r = torch.exp(logp_of(train, y) - lp_roll)
        return -token_mean(torch.minimum(r * A, torch.clamp(r, 0.8, 1.28) * A), mask)

    ours = grad(lambda: L.ppo_clip_loss(logp_of(train, y), lp_roll, adv, mask).loss, train)
    torch.testing.assert_close(ours, grad(ref, train), rtol=1e-10, atol=1e-12)
    out = L.ppo_clip_loss(logp_of(train, y), lp_roll, adv, mask)
    assert out.info["masked_tokens"] > 0 or seed  # the perturbation is large enough to clip somewhere


def test_ppo_gradient_matches_finite_differences():
    roll, train, y, adv, mask, lp_roll = case(7, B=2, T=3, V=4)
    g = grad(lambda: L.ppo_clip_loss(logp_of(train, y), lp_roll, adv, mask).loss, train)
    A = adv[:, None].expand(mask.shape)

    def obj(x):
        r = torch.exp(logp_of(x, y) - lp_roll)
        return float(-token_mean(torch.minimum(r * A, torch.clamp(r, 0.8, 1.28) * A), mask))

    x0 = train.detach().clone()
    h = 1e-6
    fd = torch.zeros_like(x0)
    for idx in np.ndindex(*x0.shape):
        xp, xm = x0.clone(), x0.clone()
        xp[idx] += h
        xm[idx] -= h
        fd[idx] = (obj(xp) - obj(xm)) / (2 * h)
    torch.testing.assert_close(g, fd, rtol=1e-5, atol=1e-8)


def test_grpo_uses_per_sequence_means():
    roll, train, y, adv, mask, lp_roll = case(3)
    A = adv[:, None].expand(mask.shape)

    def ref():
        r = torch.exp(logp_of(train, y) - lp_roll)
        per_tok = torch.where(mask, torch.minimum(r * A, torch.clamp(r, 0.8, 1.28) * A), torch.zeros_like(r))
        return -(per_tok.sum(-1) / mask.sum(-1)).mean()

    ours = grad(lambda: L.grpo_clip_loss(logp_of(train, y), lp_roll, adv, mask).loss, train)
    torch.testing.assert_close(ours, grad(ref, train))


def dppo_rule_binary_tv(p_y, q_y, A, delta):
    """Independent restatement of docs/masks.md#dppo with Binary-TV: drop iff (A>0, r>1, |p−q|>δ) or (A<0, r<1, |p−q|>δ)."""
    D = (p_y - q_y).abs()
    return ~(((A > 0) & (q_y > p_y) & (D > delta)) | ((A < 0) & (q_y < p_y) & (D > delta)))


@pytest.mark.parametrize("seed", range(4))
def test_dppo_gradient_is_masked_is_gradient(seed):
    roll, train, y, adv, mask, lp_roll = case(seed, scale=1.5)
    A = adv[:, None].expand(mask.shape)
    lp = logp_of(train, y).detach()
    M = dppo_rule_binary_tv(lp_roll.exp(), lp.exp(), A, 0.15) & mask
    assert (~M & mask).any() or seed  # something is masked in most draws

    def ref():  # L^DPPO = E[Σ_t M_t·r_t·Â_t] (docs/masks.md#dppo), M held fixed
        r = torch.exp(logp_of(train, y) - lp_roll)
        return -torch.where(M, r * A, torch.zeros_like(r)).sum() / mask.sum()

    out = L.dppo_loss(logp_of(train, y), lp_roll, adv, mask, threshold=0.15)
    assert torch.equal(out.keep, M)
    ours = grad(lambda: L.dppo_loss(logp_of(train, y), lp_roll, adv, mask, threshold=0.15).loss, train)
    torch.testing.assert_close(ours, grad(ref, train))


def test_truncated_weights_tis_icepop_cispo():
    roll, train, y, adv, mask, lp_roll = case(11, scale=2.0)
    A = adv[:, None].expand(mask.shape)
    r0 = torch.exp(logp_of(train, y) - lp_roll).detach()
    assert (r0 > 2).any() and ((r0 < 0.5) | (r0 > 5)).any()

    def ref_tis():  # r ≤ C: ∇(r·A); r > C: C·A·∇log π
        lp = logp_of(train, y)
        r = torch.exp(lp - lp_roll)
        return -token_mean(torch.where(r0 <= 2.0, r * A, 2.0 * A * lp), mask)

    def ref_icepop():  # weights outside [α, β] are zero, inside ∇(r·A)
        r = torch.exp(logp_of(train, y) - lp_roll)
        return -token_mean(torch.where((r0 >= 0.5) & (r0 <= 5.0), r * A, torch.zeros_like(r)), mask)

    torch.testing.assert_close(
        grad(lambda: L.tis_loss(logp_of(train, y), lp_roll, adv, mask).loss, train), grad(ref_tis, train)
    )
    torch.testing.assert_close(
        grad(lambda: L.icepop_loss(logp_of(train, y), lp_roll, adv, mask).loss, train), grad(ref_icepop, train)
    )
    c = L.cispo_loss(logp_of(train, y), lp_roll, adv, mask)
    assert c.keep[mask].all() and float(c.weight.max()) <= 3.0 + 1e-12


def test_seq_mis_gradient_is_sequence_is_gradient():
    roll, train, y, adv, mask, lp_roll = case(5, scale=0.6)
    lp0 = logp_of(train, y).detach()
    rho0 = torch.exp(torch.where(mask, lp0 - lp_roll, torch.zeros_like(lp0)).sum(-1))
    C = float(rho0.median())  # rejects some sequences, keeps others

    def ref():  # ∇E_roll[1(ρ(y) ≤ C)·ρ(y)·A] with ρ(y) = Π_t r_t, normalised by N
        lp = logp_of(train, y)
        rho = torch.exp(torch.where(mask, lp - lp_roll, torch.zeros_like(lp)).sum(-1))
        return -(torch.where(rho0 <= C, rho * adv, torch.zeros_like(rho))).sum() / rho.shape[0]

    out = L.seq_mis_loss(logp_of(train, y), lp_roll, adv, mask, C=C, norm="batch")
    assert 0 < out.info["sequences_rejected"] < 3
    torch.testing.assert_close(
        grad(lambda: L.seq_mis_loss(logp_of(train, y), lp_roll, adv, mask, C=C, norm="batch").loss, train),
        grad(ref, train),
    )


def test_decoupled_tis_splits_mismatch_and_drift():
    roll, train, y, adv, mask, lp_roll = case(2)
    lp_old = logp_of(train, y).detach() + 0.3  # a θ_old recompute different from θ
    out = L.tis_loss(logp_of(train, y), lp_roll, adv, mask, C=2.0, logp_old=lp_old)
    k = torch.exp(lp_old - lp_roll)
    r_old = torch.exp(logp_of(train, y).detach() - lp_old)
    torch.testing.assert_close(out.weight, torch.clamp(k, max=2.0) * r_old)
    assert torch.equal(out.keep, L.ppo_keep(r_old, adv) & mask)


def exact_kl(roll, train):
    p = torch.log_softmax(roll, -1)
    q = torch.log_softmax(train.detach(), -1)
    return (p.exp() * (p - q)).sum(-1)


def test_trm_mask_and_normalisation_by_total_N():
    roll, train, y, adv, mask, lp_roll = case(9, B=4, scale=0.4)
    kl = exact_kl(roll, train)
    delta = float(torch.where(mask, kl, torch.zeros_like(kl)).amax(-1).median())
    M = (
        torch.where(mask, kl, torch.zeros_like(kl)).amax(-1) <= delta
    )  # docs/bounds.md#trm-masks max criterion, restated
    assert 0 < int(M.sum()) < 4

    def ref():  # (1/N)Σ_i M_i·A_i·Σ_t ρ_t  (∇ = (1/N)Σ M A Σ ρ ∇log π)
        r = torch.exp(logp_of(train, y) - lp_roll)
        return -(M.to(r.dtype) * adv * torch.where(mask, r, torch.zeros_like(r)).sum(-1)).sum() / 4

    out = L.trm_loss(logp_of(train, y), lp_roll, adv, mask, kl=kl, threshold=delta)
    assert torch.equal(out.keep[:, 0], M) and out.info["sequences_rejected"] == int((~M).sum())
    torch.testing.assert_close(
        grad(lambda: L.trm_loss(logp_of(train, y), lp_roll, adv, mask, kl=kl, threshold=delta).loss, train),
        grad(ref, train),
    )
    # A rejected sequence still counts in N: the accepted sequences' gradient does not grow when others are rejected.
    g_all = grad(lambda: L.trm_loss(logp_of(train, y), lp_roll, adv, mask, kl=kl, threshold=1e9).loss, train)
    g_m = grad(lambda: L.trm_loss(logp_of(train, y), lp_roll, adv, mask, kl=kl, threshold=delta).loss, train)
    torch.testing.assert_close(g_m[M], g_all[M])
    assert torch.all(g_m[~M] == 0)


def test_trm_combined_criterion_and_heuristic_modes():
    roll, train, y, adv, mask, lp_roll = case(4, B=4, scale=0.4)
    kl = exact_kl(roll, train)
    mx = torch.where(mask, kl, torch.zeros_like(kl)).amax(-1)
    mean = torch.where(mask, kl, torch.zeros_like(kl)).sum(-1) / mask.sum(-1)
    d_max, d_avg = float(mx.max()) + 1, float(mean.median())
    out = L.trm_loss(logp_of(train, y), lp_roll, adv, mask, kl=kl, threshold=d_max, avg_threshold=d_avg)
    assert torch.equal(out.keep[:, 0], mean <= d_avg)
    lp = logp_of(train, y).detach()
    k2 = 0.5 * (lp - lp_roll) ** 2
    k2max = torch.where(mask, k2, torch.zeros_like(k2)).amax(-1)
    h = L.trm_loss(logp_of(train, y), lp_roll, adv, mask, mode="k2max", threshold=float(k2max.median()))
    assert torch.equal(h.keep[:, 0], k2max <= float(k2max.median()))


# ---- worked examples--------------------------------------------------------------------------------------------
ROWS = [
    (0.10, 0.09),
    (0.99, 0.80),
    (1e-4, 1e-2),
    (0.90, 0.001),
]  # (p_y roll, q_y train): docs/intervals.md#worked-example-sampled-token-data-only


def row_tensors(i, adv):
    p, q = ROWS[i]
    lp_roll = torch.tensor([[math.log(p)]], dtype=F64)
    logp = torch.tensor([[math.log(q)]], dtype=F64, requires_grad=True)
    return logp, lp_roll, torch.tensor([float(adv)], dtype=F64)


def test_spec_7_2_row2_grpo_does_not_fire_dppo_masks():
    logp, lp_roll, A = row_tensors(1, -1.0)
    assert L.grpo_clip_loss(logp, lp_roll, A).keep.all()  # r = 0.808 > 0.8
    assert not L.dppo_loss(logp, lp_roll, A, threshold=0.15).keep.any()  # 0.19 > 0.15, r < 1, A < 0
    assert L.dppo_loss(logp, lp_roll, A, threshold=0.2).keep.all()
    # sampled-token-only certificate TV ∈ [0.19, 0.20]: C-DPPO masks at θ = 0.15 (OUT), keeps at θ = 0.25 (IN)
    empty = {
        "p_ids": torch.empty(1, 1, 0, dtype=torch.long),
        "p_lp": torch.empty(1, 1, 0),
        "q_ids": torch.empty(1, 1, 0, dtype=torch.long),
        "q_lp": torch.empty(1, 1, 0, dtype=F64),
        "sampled_id": torch.tensor([[0]]),
    }
    c = L.cdppo_loss(logp, lp_roll, A, lists=empty, threshold=0.15, precision="exact")
    assert not c.keep.any() and c.info["status_counts"]["OUT"] == 1
    c = L.cdppo_loss(logp, lp_roll, A, lists=empty, threshold=0.25, precision="exact")
    assert c.keep.all() and c.info["status_counts"]["IN"] == 1
    # k2 = 0.022704 ≤ 0.05: TRM-Max with k2 accepts; the same token with A > 0 is direction-safe for DPPO
    assert L.trm_loss(logp, lp_roll, A, mode="k2max", threshold=0.05).keep.all()
    assert L.dppo_loss(logp, lp_roll, -A, threshold=0.15).keep.all()


def test_spec_7_2_row3_ppo_clips_dppo_does_not():
    logp, lp_roll, A = row_tensors(2, 1.0)
    assert not L.ppo_clip_loss(logp, lp_roll, A).keep.any()  # r = 100 > 1.28
    assert L.dppo_loss(logp, lp_roll, A, threshold=0.15).keep.all()  # 0.0099 < 0.15
    assert L.dppo_loss(logp, lp_roll, A, threshold=0.05, divergence="binary_kl").keep.all()  # 0.009489
    assert not L.trm_loss(logp, lp_roll, A, mode="k2max", threshold=0.05).keep.any()  # k2 = 10.6
    # the PPO leak (docs/masks.md#ppo-clip): r = 100 with A < 0 is not clipped
    assert L.ppo_clip_loss(logp, lp_roll, -A).keep.all()


def test_spec_7_2_row4_binary_kl():
    logp, lp_roll, A = row_tensors(3, -1.0)  # Binary-KL 5.891997 > 0.05, r ≪ 1, A < 0
    assert not L.dppo_loss(logp, lp_roll, A, threshold=0.05, divergence="binary_kl").keep.any()
    logp, lp_roll, A = row_tensors(0, -1.0)  # Binary-KL 0.000591
    assert L.dppo_loss(logp, lp_roll, A, threshold=0.05, divergence="binary_kl").keep.all()


def example_7_1_lists():
    p = [0.50, 0.25, 0.15, 0.07, 0.03]
    q = [0.40, 0.10, 0.10, 0.05, 0.35]
    lists = {
        "p_ids": torch.tensor([[[0, 1]]]),
        "p_lp": torch.tensor([[[math.log(0.5), math.log(0.25)]]], dtype=F64),
        "q_ids": torch.tensor([[[0, 4]]]),
        "q_lp": torch.tensor([[[math.log(0.4), math.log(0.35)]]], dtype=F64),
        "sampled_id": torch.tensor([[2]]),
    }
    return p, q, lists


@pytest.mark.parametrize(
    "adv,theta,kept",
    [
        (-1.0, 0.3, False),  # TV ∈ [0.25, 0.50], r < 1, A < 0: UNDETERMINED → drop
        (1.0, 0.3, True),  # direction-safe: never blocked
        (-1.0, 0.2, False),  # lo 0.25 > 0.2: OUT
        (-1.0, 0.5, True),
    ],
)  # hi 0.50 ≤ 0.5: IN
def test_spec_7_1_cdppo_interval_decisions(adv, theta, kept):
    p, q, lists = example_7_1_lists()
    logp = torch.tensor([[math.log(q[2])]], dtype=F64, requires_grad=True)
    lp_roll = torch.tensor([[math.log(p[2])]], dtype=F64)
    c = L.cdppo_loss(
        logp, lp_roll, torch.tensor([adv], dtype=F64), lists=lists, threshold=theta, precision="exact", adaptive=False
    )
    assert bool(c.keep.all()) is kept
    # DPPO Binary-TV sees only |0.15 − 0.10| = 0.05 and keeps the token at every one of these thresholds
    assert L.dppo_loss(logp, lp_roll, torch.tensor([adv], dtype=F64), threshold=theta).keep.all()


def full_lists(p_logp, q_logp, K):
    """Top-K lists of both sides from full log-probs ``[B, T, V]``."""
    pv, pi = torch.topk(p_logp, K, -1)
    qv, qi = torch.topk(q_logp, K, -1)
    return {"p_ids": pi, "p_lp": pv, "q_ids": qi, "q_lp": qv}


@hsettings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), theta=st.sampled_from([0.05, 0.1, 0.15, 0.2]), K=st.integers(0, 6))
def test_cdppo_keeps_subset_of_dppo_and_equals_exact_tv_rule_at_full_k(seed, theta, K):
    roll, train, y, adv, mask, lp_roll = case(seed, B=2, T=3, V=6, scale=1.0)
    p_logp, q_logp = torch.log_softmax(roll, -1), torch.log_softmax(train.detach(), -1)
    lists = full_lists(p_logp, q_logp, K)
    lists["sampled_id"] = y
    lp = logp_of(train, y)
    c = L.cdppo_loss(lp, lp_roll, adv, mask, lists=lists, threshold=theta, precision="exact")
    d = L.dppo_loss(lp, lp_roll, adv, mask, threshold=theta)
    assert not (c.keep & ~d.keep).any()  # binary TV ≤ TV ≤ certified hi: C-DPPO never keeps what DPPO drops
    if K == 6:  # full lists: the interval collapses to the exact TV → DPPO's rule with exact TV
        tv = 0.5 * (p_logp.exp() - q_logp.exp()).abs().sum(-1)
        A = adv[:, None].expand(mask.shape)
        q_y = lp.detach().exp()
        p_y = lp_roll.exp()
        away = ((A > 0) & (q_y > p_y)) | ((A < 0) & (q_y < p_y))
        expect = ~(away & (tv > theta + 1e-12)) & mask
        near = (tv - theta).abs() < 1e-9
        assert torch.equal(c.keep[~near], expect[~near])


def test_cdppo_budget_guard_drops_whole_sequences():
    roll, train, y, adv, mask, lp_roll = case(1, B=4, T=4, V=6, scale=1.0)
    p_logp, q_logp = torch.log_softmax(roll, -1), torch.log_softmax(train.detach(), -1)
    lists = full_lists(p_logp, q_logp, 6)
    lists["sampled_id"] = y
    lp = logp_of(train, y)
    c = L.cdppo_loss(lp, lp_roll, adv, mask, lists=lists, threshold=1.0, precision="exact", budget=0.05)
    tv = 0.5 * (p_logp.exp() - q_logp.exp()).abs().sum(-1)
    eps_hat = torch.where(mask, tv, torch.zeros_like(tv)).amax(-1)
    eps_star = c.info["guard"]["eps_star"]
    assert 0 < eps_star < 1
    assert torch.equal(c.keep.any(-1), eps_hat <= eps_star + 1e-12)
    assert c.info["guard"]["sequences_dropped"] == int((eps_hat > eps_star).sum())


def test_bad_norm_rejected():
    roll, train, y, adv, mask, lp_roll = case(0)
    with pytest.raises(ValueError):
        L.ppo_clip_loss(logp_of(train, y), lp_roll, adv, mask, norm="nope")


def test_seq_tis_weight_is_truncated_sequence_ratio():
    roll, train, y, adv, mask, lp_roll = case(6, scale=0.5)
    lp = logp_of(train, y)
    out = L.seq_tis_loss(lp, lp_roll, adv, mask, C=1.5)
    rho = torch.exp(torch.where(mask, lp.detach() - lp_roll, torch.zeros_like(lp_roll)).sum(-1))
    torch.testing.assert_close(out.weight, torch.clamp(rho, max=1.5)[:, None].expand_as(out.weight))
    assert out.keep[mask].all()
