"""Two-sided token-TV intervals and KL bounds from partial information (docs/intervals.md: TV interval from top-K
lists, KL bounds, error-robust widening).

p = π_roll (rollout / engine, the distribution the token was sampled from), q = π_θ (trainer).
Inputs per position: each side's top-K list (ids, log-probs, descending, K may be 0 and may differ) and the
sampled token y with both log-probs a = log p(y), b = log q(y).

Sets (docs/intervals.md#tv-interval-from-top-k-lists): S_p = engine list ∪ {y}, S_q = trainer list ∪ {y},
B = S_p ∩ S_q (always ∋ y), W = V \\ B,
P = S_p \\ B, Q = S_q \\ B. D_B = Σ_B|p_i − q_i|, p_W = 1 − Σ_B p_i, a_P = Σ_P p_i, b_Q = Σ_Q q_j,
t_p = 1 − Σ_{S_p} p_i, t_q likewise; top-K caps c_p = min(τ_p, t_p), c_q = min(τ_q, t_q) (τ = the K-th listed value).

Theorem A:  TV ∈ [½(D_B + max(|p_W − q_W|, ℓ_P + ℓ_Q, exact capped W-minimum)),  1 − Σ_B min(p_i, q_i)].

Caps (docs/intervals.md#top-k-caps) need a list to be that side's true top-K; ``caps`` is a bool for both sides or
a pair (roll, train): fcr/1 trainer lists are the trainer's values on ids covering the rollout's
(docs/fcr.md#rollout-and-trainer), not its top-K.

Tensor layout: lists are ``[..., K]`` with id ``-1`` marking an absent (padding) entry; padding must be trailing.
Everything is float64. ``tv_interval_topk`` runs the compiled kernel of :mod:`workers.certify.interval_kernel`
(one pass per position, no Python loop per token); tests/certify/slow_reference.py is the same mathematics written
in plain Python, and the two agree within 1e-12.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from workers.certify.flags import (  # noqa: F401 - the flags are re-exported from here (callers import them)
    AGREE_TOL,
    ERR_BAD_ID,
    ERR_DUPLICATE,
    ERR_MASS,
    ERR_NONFINITE,
    ERR_PADDING,
    ERR_POSITIVE,
    ERR_REASONS,
    ERR_SAMPLED_ABOVE_CAP,
    ERR_SAMPLED_MISMATCH,
    ERR_UNSORTED,
    POS_TOL,
    SUM_TOL,
    describe_errors,
)
from workers.certify.interval_kernel import interval_rows
from workers.certify.robust import NORM_SLACK, UNIT_ROUNDOFF, eta_from_precision


BLOCK_ROWS = 2048  # positions per kernel call: the block's exponentials (2 × K × 2048 float64) stay in the L2 cache


class DataError(ValueError):
    """Raised by the single-position API for input that cannot be certified (fail closed)."""

    def __init__(self, flags: int):
        self.flags = int(flags)
        self.reasons = describe_errors(flags)
        super().__init__("; ".join(self.reasons))


class IntervalResult(NamedTuple):
    lo: torch.Tensor  # certified lower end of TV (fail closed: 0)
    hi: torch.Tensor  # certified upper end of TV (fail closed: 1)
    err: torch.Tensor  # int32 data-error flags, 0 = ok
    kl_lo: torch.Tensor  # certified lower bound on KL(p‖q): max(coarsened KL, Pinsker 2·lo²)
    kl_hi: torch.Tensor  # +inf unless p's mass is all on B (then Σ_B p log(p/q) is exact up to η)


def _f64(x):
    return torch.as_tensor(x, dtype=torch.float64)


def _ids(x):
    return torch.as_tensor(x, dtype=torch.int64)


def _rmin(x, fill):
    """Row-wise min that also works for K = 0 (returns ``fill``)."""
    if x.shape[1] == 0:
        return torch.full((x.shape[0],), fill, dtype=x.dtype)
    return x.amin(1)


def _list_checks(ids, lp, valid, eta, sorted_required=True):
    """Per-row flags for one side's list: padding order, duplicates, descending order (top-K lists only — an
    arbitrary subset, ``caps=False``, may come in any order), value sanity."""
    err = torch.zeros(ids.shape[0], dtype=torch.int32)
    K = ids.shape[1]
    if K == 0:
        return err
    if K > 1:
        # padding must be trailing: a valid entry after an invalid one
        bad_pad = (~valid[:, :-1] & valid[:, 1:]).any(1)
        err |= bad_pad.to(torch.int32) * ERR_PADDING
        both = valid[:, :-1] & valid[:, 1:]
        # Storage rounding is monotone, so the logged order must hold up to the η of the two values.
        if sorted_required:
            unsorted = (both & (lp[:, 1:] > lp[:, :-1] + eta[:, 1:] + eta[:, :-1] + 1e-12)).any(1)
            err |= unsorted.to(torch.int32) * ERR_UNSORTED
        # duplicates: sort the ids (padding made distinct negatives) and compare neighbours — O(K log K)
        distinct_pad = torch.where(valid, ids, -1 - torch.arange(K, dtype=ids.dtype))
        srt = torch.sort(distinct_pad, 1).values
        err |= (srt[:, 1:] == srt[:, :-1]).any(1).to(torch.int32) * ERR_DUPLICATE
    vals = torch.where(valid, lp, torch.zeros_like(lp))
    err |= (~torch.isfinite(vals)).any(1).to(torch.int32) * ERR_NONFINITE
    err |= (vals > POS_TOL).any(1).to(torch.int32) * ERR_POSITIVE
    return err


def _prepare(p_ids, p_lp, q_ids, q_lp, y, a, b):
    # host copies without autograd history: the kernel is numpy (certificates are not differentiated)
    p_ids, q_ids, y = (_ids(x).detach().cpu() for x in (p_ids, q_ids, y))
    p_lp, q_lp, a, b = (_f64(x).detach().cpu() for x in (p_lp, q_lp, a, b))
    lead = y.shape
    if p_ids.shape != p_lp.shape or q_ids.shape != q_lp.shape:
        raise ValueError("ids and log-probs of a list must have the same shape")
    if p_ids.shape[:-1] != lead or q_ids.shape[:-1] != lead or a.shape != lead or b.shape != lead:
        raise ValueError(f"shapes disagree: lists {tuple(p_ids.shape)}/{tuple(q_ids.shape)}, sampled {tuple(lead)}")
    return p_ids, p_lp, q_ids, q_lp, y, a, b, lead


def _caps_pair(caps):
    """``caps`` → (engine side, trainer side). A bool applies to both lists; a pair ``(roll, train)`` declares each
    side separately (e.g. ``(True, False)`` for fcr/1 files, whose trainer list is the trainer's values on a superset
    of the rollout's ids, not the trainer's own top-K: docs/fcr.md#rollout-and-trainer)."""
    if isinstance(caps, (tuple, list)):
        if len(caps) != 2:
            raise ValueError("caps must be a bool or a pair (roll, train)")
        return bool(caps[0]), bool(caps[1])
    return bool(caps), bool(caps)


def tv_interval_topk(
    p_ids,
    p_lp,
    q_ids,
    q_lp,
    sampled_id,
    logp_roll_y,
    logp_train_y,
    *,
    caps: bool = True,
    precision: str | None = "exact",
    eta=None,
) -> IntervalResult:
    """Certified TV interval, KL bounds and data-error flags over ``[..., K]`` lists (Theorem A, KL bounds and
    widening: docs/intervals.md#tv-interval-from-top-k-lists).

    ``precision`` ∈ {"exact", "fp64", "fp32", "fp16", "bf16"} or an explicit ``eta`` (log-space error per logged
    value) widens the interval so it contains the TV of every pair consistent with the logged values up to η
    (precision-based η includes the normalisation slack ν, see :func:`workers.certify.robust.eta_from_precision`).
    ``caps``: True if each list is that side's true top-K (descending; caps τ apply and an unlisted sampled token
    above the K-th value is a data error), False for arbitrary subsets, or a pair ``(roll, train)``.
    Returns :class:`IntervalResult` ``(lo, hi, err, kl_lo, kl_hi)`` with the leading shape of ``sampled_id``.
    """
    caps_p, caps_q = _caps_pair(caps)
    p_ids, p_lp, q_ids, q_lp, y, a, b, lead = _prepare(p_ids, p_lp, q_ids, q_lp, sampled_id, logp_roll_y, logp_train_y)
    Kp, Kq = p_ids.shape[-1], q_ids.shape[-1]
    n = y.numel()
    P_I, P_R = p_ids.reshape(n, Kp).contiguous().numpy(), p_lp.reshape(n, Kp).contiguous().numpy()
    Q_I, Q_R = q_ids.reshape(n, Kq).contiguous().numpy(), q_lp.reshape(n, Kq).contiguous().numpy()
    Y, A, B = (t.reshape(-1).contiguous().numpy() for t in (y, a, b))
    if eta is None:
        if precision is None:
            precision = "exact"
        if precision not in UNIT_ROUNDOFF:
            raise ValueError(f"precision must be one of {sorted(UNIT_ROUNDOFF)}")
        u = UNIT_ROUNDOFF[precision]
        k_eta, nu = u / (1.0 - u), NORM_SLACK[precision]
        E = (np.zeros((0, 0)), np.zeros((0, 0)), np.zeros(0), np.zeros(0))
    else:
        k_eta = nu = 0.0
        E = tuple(
            eta_from_precision(x, precision, eta).detach().contiguous().numpy()
            for x in (p_lp.reshape(n, Kp), q_lp.reshape(n, Kq), a.reshape(-1), b.reshape(-1))
        )
    lo, hi, kl_lo, kl_hi = (np.empty(n) for _ in range(4))
    err = np.empty(n, np.int32)
    for s in range(0, n, BLOCK_ROWS):
        sl = slice(s, s + BLOCK_ROWS)
        with np.errstate(over="ignore", invalid="ignore"):
            P_X, Q_X = np.exp(P_R[sl]), np.exp(Q_R[sl])
        Es = E if eta is None else tuple(x[sl] for x in E)
        interval_rows(
            P_I[sl],
            P_R[sl],
            P_X,
            Q_I[sl],
            Q_R[sl],
            Q_X,
            Y[sl],
            A[sl],
            B[sl],
            caps_p,
            caps_q,
            k_eta,
            nu,
            eta is not None,
            *Es,
            lo[sl],
            hi[sl],
            err[sl],
            kl_lo[sl],
            kl_hi[sl],
        )
    t = torch.from_numpy
    return IntervalResult(
        t(lo).reshape(lead), t(hi).reshape(lead), t(err).reshape(lead), t(kl_lo).reshape(lead), t(kl_hi).reshape(lead)
    )


def tv_interval_batch(
    p_topk_ids,
    p_topk_logprobs,
    q_topk_ids,
    q_topk_logprobs,
    sampled_id,
    p_sampled_logprob,
    q_sampled_logprob,
    *,
    topk_caps: bool = True,
    precision: str | None = "exact",
    eta=None,
    return_status: bool = False,
):
    """Vectorised :func:`tv_interval` over ``[B, T, K]`` lists (any leading shape; id −1 = padding).

    Returns ``(lo, hi)`` float64 tensors of shape ``[B, T]`` (fail closed: 0 / 1 where the input is bad), or
    ``(lo, hi, err)`` with ``return_status=True`` (``err`` = int32 flags, see :data:`ERR_REASONS`).
    """
    r = tv_interval_topk(
        p_topk_ids,
        p_topk_logprobs,
        q_topk_ids,
        q_topk_logprobs,
        sampled_id,
        p_sampled_logprob,
        q_sampled_logprob,
        caps=topk_caps,
        precision=precision,
        eta=eta,
    )
    return (r.lo, r.hi, r.err) if return_status else (r.lo, r.hi)


def _as_list_tensors(ids, lps):
    ids = list(ids)
    lps = list(lps)
    if len(ids) != len(lps):
        raise ValueError("a top-K list has different numbers of ids and log-probs")
    return torch.tensor([ids], dtype=torch.int64).reshape(1, len(ids)), torch.tensor(
        [lps], dtype=torch.float64
    ).reshape(1, len(lps))


def tv_interval(
    p_topk_ids,
    p_topk_logprobs,
    q_topk_ids,
    q_topk_logprobs,
    sampled_id,
    p_sampled_logprob,
    q_sampled_logprob,
    *,
    topk_caps: bool = True,
) -> tuple[float, float]:
    """Certified interval ``(lo, hi)`` for the token TV at one position (Theorem A,
    docs/intervals.md#tv-interval-from-top-k-lists; exact arithmetic).

    p = rollout, q = trainer. Each list is that side's K most likely tokens, descending (K may be 0 and differ);
    the sampled token's two log-probs are passed separately (where it is listed, the values must agree).
    ``topk_caps=False`` when the lists are arbitrary subsets (no cap on unlisted mass is then assumed), or a pair
    ``(roll, train)`` per side (e.g. ``(True, False)``: the trainer list is the trainer's values on some ids).
    Raises :class:`DataError` (a ``ValueError``) for input that cannot be certified.
    """
    pi, pl = _as_list_tensors(p_topk_ids, p_topk_logprobs)
    qi, ql = _as_list_tensors(q_topk_ids, q_topk_logprobs)
    r = tv_interval_topk(
        pi,
        pl,
        qi,
        ql,
        torch.tensor([int(sampled_id)]),
        torch.tensor([float(p_sampled_logprob)], dtype=torch.float64),
        torch.tensor([float(q_sampled_logprob)], dtype=torch.float64),
        caps=topk_caps,
    )
    if int(r.err[0]):
        raise DataError(int(r.err[0]))
    return float(r.lo[0]), float(r.hi[0])


def kl_bounds(
    p_ids,
    p_lp,
    q_ids,
    q_lp,
    sampled_id,
    logp_roll_y,
    logp_train_y,
    *,
    q_full_logp=None,
    caps: bool = True,
    precision: str | None = "exact",
    eta=None,
):
    """Certified ``(kl_lo, kl_hi)`` for KL(p‖q) (docs/intervals.md#kl-bounds). Lower: max(coarsened KL over B ∪ {W},
    Pinsker 2·TV_lo²).
    Upper: +∞ from top-K lists (no finite bound exists without assumptions); with the trainer's full log-probs
    ``q_full_logp`` ``[..., V]`` the finite Theorem-B vertex bound of :func:`tv_interval_fullq` (η = 0 only)."""
    if q_full_logp is not None:
        r = tv_interval_fullq(p_ids, p_lp, q_full_logp, sampled_id, logp_roll_y, caps=caps)
        return r["kl_lo"], r["kl_hi"]
    r = tv_interval_topk(
        p_ids, p_lp, q_ids, q_lp, sampled_id, logp_roll_y, logp_train_y, caps=caps, precision=precision, eta=eta
    )
    return r.kl_lo, r.kl_hi


def tv_interval_fullq(
    roll_ids, roll_logp, train_logp, sampled_id, logp_roll_y, *, caps: bool = True, exact_hi: bool = False
) -> dict:
    """Theorem B (docs/intervals.md#trainer-distribution-known): the trainer's full distribution q (log-probs
    ``[..., V]``) and the engine's top-K only.

    B = S_p = engine list ∪ {y}, W = V \\ S_p, t_p = p_W, c = min(τ_p, t_p) (caps) or t_p:

        TV_lo = ½[D_B + t_p + q_W − 2·min(t_p, Σ_W min(q_j, c))]                           (exact)
        TV_hi = ½[D_B + t_p + q_W − 2·O_min]  (``exact_hi``: O_min from pouring t_p, ≤ c per id, onto W in
                increasing q; otherwise O_min = 0, i.e. 1 − Σ_B min(p_i, q_i), conservative and sort-free)
        KL_lo = max(Σ_B p log(p/q) + t_p log(t_p/q_W), 2·TV_lo²),
        KL_hi = Σ_B p log(p/q) + Σ_k x_k log(x_k/q_(k)) with the same greedy pour (convex max at a vertex,
        docs/intervals.md#kl-bounds).

    Returns a dict of ``lo, hi, kl_lo, kl_hi, err`` (exact arithmetic, η = 0). O(V log V) per position for the
    KL upper bound and ``exact_hi`` — meant for training-step audits, not the file path.
    """
    ids = _ids(roll_ids)
    lp = _f64(roll_logp)
    qf = _f64(train_logp)
    y = _ids(sampled_id)
    a = _f64(logp_roll_y)
    lead = y.shape
    K, V = ids.shape[-1], qf.shape[-1]
    n = y.numel()
    ids, lp, qf, y, a = ids.reshape(n, K), lp.reshape(n, K), qf.reshape(n, V), y.reshape(n), a.reshape(n)
    valid = ids >= 0
    err = _list_checks(ids, lp, valid, torch.zeros_like(lp), caps)
    err |= (~torch.isfinite(a) | (a > POS_TOL)).to(torch.int32) * ERR_NONFINITE
    err |= ((ids >= V) & valid).any(1).to(torch.int32) * ERR_BAD_ID
    err |= ((y < 0) | (y >= V)).to(torch.int32) * ERR_BAD_ID
    ids_c = torch.where(valid & (ids < V), ids, 0)
    q = torch.exp(qf)
    pv = torch.where(valid, torch.exp(lp.clamp(max=0.0)), torch.zeros_like(lp))
    # membership vector over the vocabulary: p known on S_p = list ∪ {y}
    # (scatter_add so that padding rows, mapped to id 0 with zero weight, never overwrite a real entry)
    inS = torch.zeros(q.shape, dtype=torch.int64).scatter_add_(1, ids_c, (valid & (ids < V)).to(torch.int64)) > 0
    y_c = y.clamp(0, V - 1)
    y_listed = inS.gather(1, y_c[:, None])[:, 0]
    pfull = torch.zeros_like(q).scatter_add_(1, ids_c, torch.where(ids < V, pv, torch.zeros_like(pv)))
    pfull.scatter_(
        1,
        y_c[:, None],
        torch.where(y_listed, pfull.gather(1, y_c[:, None])[:, 0], torch.exp(a.clamp(max=0.0)))[:, None],
    )
    inS.scatter_(1, y_c[:, None], torch.ones_like(y_listed)[:, None])
    pS = torch.where(inS, pfull, torch.zeros_like(q))
    qS = torch.where(inS, q, torch.zeros_like(q))
    qW_vec = torch.where(inS, torch.zeros_like(q), q)
    D_B = (pS - qS).abs().sum(1)
    t_p = torch.clamp(1.0 - pS.sum(1), min=0.0)
    err |= (pS.sum(1) > 1.0 + SUM_TOL).to(torch.int32) * ERR_MASS
    q_W = qW_vec.sum(1)
    if caps:
        tau = _rmin(torch.where(valid, pv, torch.full_like(pv, math.inf)), math.inf)
        c = torch.minimum(tau, t_p)
    else:
        c = t_p
    over_max = torch.minimum(t_p, torch.minimum(qW_vec, c[:, None]).sum(1))
    lo = 0.5 * (D_B + t_p + q_W - 2.0 * over_max)
    # Greedy pour onto W in increasing q: the k-th smallest gets x_k = clamp(t_p − k·c, 0, c).
    qW_sorted = torch.sort(torch.where(inS, torch.full_like(q, math.inf), q), dim=1).values
    k = torch.arange(V, dtype=torch.float64)[None, :]
    x = torch.clamp(t_p[:, None] - k * c[:, None], min=0.0)
    x = torch.minimum(x, c[:, None])
    x = torch.where(torch.isfinite(qW_sorted), x, torch.zeros_like(x))
    o_min = torch.where(x > 0, torch.minimum(x, qW_sorted), torch.zeros_like(x)).sum(1)
    hi = (
        0.5 * (D_B + t_p + q_W - 2.0 * o_min) if exact_hi else torch.clamp(1.0 - torch.minimum(pS, qS).sum(1), 0.0, 1.0)
    )
    hi = torch.clamp(hi, 0.0, 1.0)
    lo = torch.minimum(torch.clamp(lo, min=0.0), hi)
    kl_B = torch.where(
        pS > 0, pS * (torch.log(pS.clamp(min=1e-300)) - torch.log(qS.clamp(min=1e-300))), torch.zeros_like(q)
    ).sum(1)
    kl_Wc = torch.where(
        t_p > 0, t_p * (torch.log(t_p.clamp(min=1e-300)) - torch.log(q_W.clamp(min=1e-300))), torch.zeros_like(t_p)
    )
    kl_lo = torch.maximum(kl_B + kl_Wc, 2.0 * lo * lo).clamp(min=0.0)
    tail = torch.where(
        x > 0, x * (torch.log(x.clamp(min=1e-300)) - torch.log(qW_sorted.clamp(min=1e-300))), torch.zeros_like(x)
    ).sum(1)
    kl_hi = kl_B + tail
    bad = err != 0
    out = {
        "lo": torch.where(bad, 0.0, lo),
        "hi": torch.where(bad, 1.0, hi),
        "kl_lo": torch.where(bad, 0.0, kl_lo),
        "kl_hi": torch.where(bad, math.inf, kl_hi),
        "err": err,
    }
    return {k_: v.reshape(lead) for k_, v in out.items()}


def exact_tv_kl(p_logp, q_logp):
    """Exact ``(TV, KL(p‖q))`` from full log-probs ``[..., V]`` (docs/intervals.md#trainer-distribution-known): TV = ½Σ|p − q|,
    KL = Σ p(log p − log q)."""
    p_logp, q_logp = _f64(p_logp), _f64(q_logp)
    p, q = torch.exp(p_logp), torch.exp(q_logp)
    tv = 0.5 * (p - q).abs().sum(-1)
    kl = torch.where(p > 0, p * (p_logp - q_logp), torch.zeros_like(p)).sum(-1)
    return tv, kl
