"""Two-sided token-TV intervals and KL bounds from partial information (spec/certificates.md §5.2, §5.3, §5.5).

p = π_roll (rollout / engine, the distribution the token was sampled from), q = π_θ (trainer).
Inputs per position: each side's top-K list (ids, log-probs, descending, K may be 0 and may differ) and the
sampled token y with both log-probs a = log p(y), b = log q(y).

Sets (§5.2): S_p = engine list ∪ {y}, S_q = trainer list ∪ {y}, B = S_p ∩ S_q (always ∋ y), W = V \\ B,
P = S_p \\ B, Q = S_q \\ B. D_B = Σ_B|p_i − q_i|, p_W = 1 − Σ_B p_i, a_P = Σ_P p_i, b_Q = Σ_Q q_j,
t_p = 1 − Σ_{S_p} p_i, t_q likewise; top-K caps c_p = min(τ_p, t_p), c_q = min(τ_q, t_q) (τ = the K-th listed value).

Theorem A:  TV ∈ [½(D_B + max(|p_W − q_W|, ℓ_P + ℓ_Q, exact capped W-minimum)),  1 − Σ_B min(p_i, q_i)].

Tensor layout: lists are ``[..., K]`` with id ``-1`` marking an absent (padding) entry; padding must be trailing.
Everything is float64, vectorised over positions (no Python loop per token); rows are processed in blocks so the
``[N, K_p, K_q]`` membership test stays small.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from workers.certify.robust import eta_from_precision

# Data-error bit flags (int32). Any non-zero flag ⇒ fail closed: TV ∈ [0, 1], KL ≤ +∞, status DATA_ERROR (§5.5).
ERR_NONFINITE = 1
ERR_POSITIVE = 2
ERR_UNSORTED = 4
ERR_DUPLICATE = 8
ERR_MASS = 16
ERR_SAMPLED_MISMATCH = 32
ERR_SAMPLED_ABOVE_CAP = 64
ERR_PADDING = 128
ERR_BAD_ID = 256
ERR_REASONS = {
    ERR_NONFINITE: "non-finite log-prob",
    ERR_POSITIVE: "positive log-prob",
    ERR_UNSORTED: "top-K list not sorted descending",
    ERR_DUPLICATE: "duplicate id in a top-K list",
    ERR_MASS: "listed probabilities sum above 1",
    ERR_SAMPLED_MISMATCH: "sampled-token log-prob disagrees with its top-K entry",
    ERR_SAMPLED_ABOVE_CAP: "sampled token more likely than the K-th listed token but not listed (not a top-K list)",
    ERR_PADDING: "padding (id -1) before a listed entry",
    ERR_BAD_ID: "negative sampled token id",
}

POS_TOL = 1e-6      # a log-prob above this is "positive" (log_softmax rounding can give +1e-7)
SUM_TOL = 1e-4      # Σ listed p may exceed 1 by this much (spec/fidelity.md §6.3 top-K tolerance)
AGREE_TOL = 1e-5    # |sampled log-prob − its list entry| allowed (log space, before η)
BLOCK_ROWS = 1 << 13  # rows per vectorised block: keeps the ~60 [rows, K] temporaries near 100 MB at K = 20


class DataError(ValueError):
    """Raised by the single-position API for input that cannot be certified (fail closed)."""

    def __init__(self, flags: int):
        self.flags = int(flags)
        self.reasons = describe_errors(flags)
        super().__init__("; ".join(self.reasons))


def describe_errors(flags: int) -> list[str]:
    """Human reasons for an error bit mask."""
    return [msg for bit, msg in ERR_REASONS.items() if int(flags) & bit]


class IntervalResult(NamedTuple):
    lo: torch.Tensor       # certified lower end of TV (fail closed: 0)
    hi: torch.Tensor       # certified upper end of TV (fail closed: 1)
    err: torch.Tensor      # int32 data-error flags, 0 = ok
    kl_lo: torch.Tensor    # certified lower bound on KL(p‖q): max(coarsened KL, Pinsker 2·lo²)
    kl_hi: torch.Tensor    # +inf unless p's mass is all on B (then Σ_B p log(p/q) is exact up to η)


def _f64(x):
    return torch.as_tensor(x, dtype=torch.float64)


def _ids(x):
    return torch.as_tensor(x, dtype=torch.int64)


def _rmax(x, fill):
    """Row-wise max that also works for K = 0 (returns ``fill``)."""
    if x.shape[1] == 0:
        return torch.full((x.shape[0],), fill, dtype=x.dtype)
    return x.amax(1)


def _rmin(x, fill):
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


def _wmin_exact(aP, bQ, tp, tq, CP, CQ, Xmax, Zmax):
    """Exact capped minimum of the W-part (§5.2, Theorem A "with caps"):

        min_{X∈[0,X_max], Z∈[0,Z_max]}  g_P(X) + g_Q(Z) + |t_p − t_q + X − Z|,
        g_P(X) = a − X + 2·(X − C_P)₊,  g_Q(Z) = b − Z + 2·(Z − C_Q)₊

    (X = unknown q-mass on P, Z = unknown p-mass on Q). The function is convex piecewise linear, so the minimum
    is attained on the finite candidate set of its breakpoints: X ∈ {0, X_max, min(C_P, X_max)} ×
    Z ∈ {0, Z_max, min(C_Q, Z_max)}, plus the diagonal points (X, clip(X + t_p − t_q)), (clip(Z − t_p + t_q), Z).
    """
    xs = torch.stack([torch.zeros_like(Xmax), Xmax, torch.minimum(CP, Xmax)], -1)   # [N,3]
    zs = torch.stack([torch.zeros_like(Zmax), Zmax, torch.minimum(CQ, Zmax)], -1)
    d = (tp - tq)[:, None]
    X = torch.cat([xs[:, :, None].expand(-1, 3, 3).flatten(1), xs,
                   torch.minimum(torch.clamp(zs - d, min=0.0), Xmax[:, None])], 1)
    Z = torch.cat([zs[:, None, :].expand(-1, 3, 3).flatten(1),
                   torch.minimum(torch.clamp(xs + d, min=0.0), Zmax[:, None]), zs], 1)
    g = (aP[:, None] - X + 2.0 * torch.clamp(X - CP[:, None], min=0.0)
         + bQ[:, None] - Z + 2.0 * torch.clamp(Z - CQ[:, None], min=0.0)
         + (d + X - Z).abs())
    return g.min(1).values


def _interval_rows(p_ids, p_lp, q_ids, q_lp, y, a, b, caps, eta_p, eta_q, eta_a, eta_b):
    """Theorem A (with η-robust widening) on flat rows: lists [N, K], sampled quantities [N]."""
    N = y.shape[0]
    zeros = torch.zeros(N, dtype=torch.float64)
    p_valid = p_ids >= 0
    q_valid = q_ids >= 0
    err = _list_checks(p_ids, p_lp, p_valid, eta_p, caps) | _list_checks(q_ids, q_lp, q_valid, eta_q, caps)
    err |= (~torch.isfinite(a) | ~torch.isfinite(b)).to(torch.int32) * ERR_NONFINITE
    err |= ((a > POS_TOL) | (b > POS_TOL)).to(torch.int32) * ERR_POSITIVE
    err |= (y < 0).to(torch.int32) * ERR_BAD_ID
    # Sanitise so that later arithmetic never sees NaN/inf (flagged rows are overwritten at the end).
    a = torch.nan_to_num(a, nan=0.0, neginf=-800.0).clamp(max=0.0)
    b = torch.nan_to_num(b, nan=0.0, neginf=-800.0).clamp(max=0.0)
    p_lp = torch.where(p_valid, torch.nan_to_num(p_lp, nan=0.0, neginf=-800.0).clamp(max=0.0), -800.0)
    q_lp = torch.where(q_valid, torch.nan_to_num(q_lp, nan=0.0, neginf=-800.0).clamp(max=0.0), -800.0)

    # ---- membership: which engine-listed ids the trainer listed too, and where the sampled token sits -----
    p_is_y = (p_ids == y[:, None]) & p_valid
    q_is_y = (q_ids == y[:, None]) & q_valid
    # Padding and the engine's own y-entry get ids that can never match, so the [N, K_p, K_q] test is one
    # comparison; reductions run on a uint8 view of the bool tensor (much faster than bool any/argmax on CPU).
    p_key = torch.where(p_valid & ~p_is_y, p_ids, -1)
    q_key = torch.where(q_valid, q_ids, -2)
    if p_key.numel() and q_key.numel() and max(int(p_key.max()), int(q_key.max())) < 2**31 - 1:
        p_key, q_key = p_key.to(torch.int32), q_key.to(torch.int32)
    match = (p_key[:, :, None] == q_key[:, None, :]).view(torch.uint8)
    in_q = match.amax(2).bool() if q_ids.shape[1] else torch.zeros(p_ids.shape, dtype=torch.bool)
    in_p = match.amax(1).bool() if p_ids.shape[1] else torch.zeros(q_ids.shape, dtype=torch.bool)
    if q_ids.shape[1] > 0:
        j = match.argmax(2)
        q_at_p = torch.gather(q_lp, 1, j)                 # trainer log-prob at the matched id
        eta_q_at_p = torch.gather(eta_q, 1, j)
    else:
        q_at_p = torch.full(p_lp.shape, -800.0, dtype=torch.float64)
        eta_q_at_p = torch.zeros_like(p_lp)
    # The sampled token's list entries must agree with the separately passed values.
    dev_a = _rmax(torch.where(p_is_y, (p_lp - a[:, None]).abs() - eta_p - eta_a[:, None], -1.0), -1.0)
    dev_b = _rmax(torch.where(q_is_y, (q_lp - b[:, None]).abs() - eta_q - eta_b[:, None], -1.0), -1.0)
    err |= ((dev_a > AGREE_TOL) | (dev_b > AGREE_TOL)).to(torch.int32) * ERR_SAMPLED_MISMATCH

    # ---- probabilities with their η-boxes [x⁻, x⁺] (x⁺ ≤ 1 is a fact, not a narrowing clamp) ------------------
    # e^{−η} ≥ 1 − η and e^{η} ≤ 1 + η + η² for η ≤ 1: the polynomial box contains the exact one and costs a
    # multiply instead of two more exp passes (it is O(η²) wider, so robust intervals still contain naive ones).
    exact = not bool((eta_p.any() or eta_q.any() or eta_a.any() or eta_b.any()))
    small = exact or max(float(e.max()) if e.numel() else 0.0 for e in (eta_p, eta_q, eta_a, eta_b)) <= 1.0

    def box(lp, eta):
        e = torch.exp(lp)
        if exact:
            return e, e, e
        if small:
            return torch.clamp(e * (1.0 - eta), min=0.0), torch.clamp(e * (1.0 + eta + eta * eta), max=1.0), e
        return torch.exp(lp - eta), torch.clamp(torch.exp(lp + eta), max=1.0), e

    pl_lo, pl_hi, pl = box(p_lp, eta_p)
    ql_lo, ql_hi, ql = box(q_lp, eta_q)
    qp_lo, qp_hi, qp = box(q_at_p, eta_q_at_p)
    pa_lo, pa_hi, pa = box(a, eta_a)
    qb_lo, qb_hi, qb = box(b, eta_b)
    mB = in_q.to(torch.float64)                           # p-list entries in B (excluding y)
    mP = (p_valid & ~in_q & ~p_is_y).to(torch.float64)    # P
    mQ = (q_valid & ~in_p & ~q_is_y).to(torch.float64)    # Q
    p_y_listed = p_is_y.any(1)
    q_y_listed = q_is_y.any(1)

    # ---- upper end: TV_hi = 1 − Σ_B min(p_i⁻, q_i⁻) (monotone in every value, hence robust) -----------------------
    overlap = torch.minimum(pa_lo, qb_lo) + (mB * torch.minimum(pl_lo, qp_lo)).sum(1)
    hi = torch.clamp(1.0 - overlap, 0.0, 1.0)

    # ---- sums: S_p = B ∪ P, S_q = B ∪ Q ------------------------------------------------------------------------
    def s(m, x):
        return (m * x).sum(1)

    sBp_lo, sBp_hi, sBp = pa_lo + s(mB, pl_lo), pa_hi + s(mB, pl_hi), pa + s(mB, pl)
    sBq_lo, sBq_hi, sBq = qb_lo + s(mB, qp_lo), qb_hi + s(mB, qp_hi), qb + s(mB, qp)
    aP_lo, aP_hi, aP = s(mP, pl_lo), s(mP, pl_hi), s(mP, pl)
    bQ_lo, bQ_hi, bQ = s(mQ, ql_lo), s(mQ, ql_hi), s(mQ, ql)
    err |= ((sBp_lo + aP_lo > 1.0 + SUM_TOL) | (sBq_lo + bQ_lo > 1.0 + SUM_TOL)).to(torch.int32) * ERR_MASS
    tp, tq = torch.clamp(1.0 - sBp - aP, min=0.0), torch.clamp(1.0 - sBq - bQ, min=0.0)
    tp_hi, tq_hi = torch.clamp(1.0 - sBp_lo - aP_lo, min=0.0), torch.clamp(1.0 - sBq_lo - bQ_lo, min=0.0)
    tp_lo, tq_lo = torch.clamp(1.0 - sBp_hi - aP_hi, min=0.0), torch.clamp(1.0 - sBq_hi - bQ_hi, min=0.0)

    # ---- top-K caps τ (the K-th listed value bounds every unlisted value) --------------------------------------
    inf = torch.full((N,), math.inf, dtype=torch.float64)
    kp = p_valid.sum(1)
    kq = q_valid.sum(1)
    if caps:
        tau_p = _rmin(torch.where(p_valid, pl, inf[:, None]), math.inf)
        tau_q = _rmin(torch.where(q_valid, ql, inf[:, None]), math.inf)
        tau_p_hi = _rmin(torch.where(p_valid, pl_hi, inf[:, None]), math.inf)
        tau_q_hi = _rmin(torch.where(q_valid, ql_hi, inf[:, None]), math.inf)
        # An unlisted sampled token must not beat the K-th listed one (else the list is not a top-K list).
        above = (~p_y_listed & (kp > 0) & (a - eta_a > torch.log(tau_p_hi) + AGREE_TOL)) | \
                (~q_y_listed & (kq > 0) & (b - eta_b > torch.log(tau_q_hi) + AGREE_TOL))
        err |= above.to(torch.int32) * ERR_SAMPLED_ABOVE_CAP
        cp, cq = torch.minimum(tau_p, tp), torch.minimum(tau_q, tq)
        cp_hi, cq_hi = torch.minimum(tau_p_hi, tp_hi), torch.minimum(tau_q_hi, tq_hi)
        # max |Δτ| over the list (min is 1-Lipschitz in the sup norm)
        dtau_p = _rmax(torch.where(p_valid, pl_hi - pl_lo, zeros[:, None]), 0.0)
        dtau_q = _rmax(torch.where(q_valid, ql_hi - ql_lo, zeros[:, None]), 0.0)
    else:
        cp, cq, cp_hi, cq_hi = tp, tq, tp_hi, tq_hi
        dtau_p = dtau_q = zeros

    # ---- lower end, closed form with worst-case inputs (§5.5): ½[Σ_B d⁻ + max(|p_W − q_W|⁻, ℓ_P⁻ + ℓ_Q⁻)] -------------
    d_y = torch.clamp(torch.maximum(pa_lo - qb_hi, qb_lo - pa_hi), min=0.0)
    d_B = d_y + (mB * torch.clamp(torch.maximum(pl_lo - qp_hi, qp_lo - pl_hi), min=0.0)).sum(1)
    pW_lo, pW_hi = torch.clamp(1.0 - sBp_hi, 0.0, 1.0), torch.clamp(1.0 - sBp_lo, 0.0, 1.0)
    qW_lo, qW_hi = torch.clamp(1.0 - sBq_hi, 0.0, 1.0), torch.clamp(1.0 - sBq_lo, 0.0, 1.0)
    gap_W = torch.clamp(torch.maximum(pW_lo - qW_hi, qW_lo - pW_hi), min=0.0)
    CP_hi = s(mP, torch.minimum(pl_hi, cq_hi[:, None]))
    CQ_hi = s(mQ, torch.minimum(ql_hi, cp_hi[:, None]))
    lP = torch.clamp(aP_lo - torch.minimum(tq_hi, CP_hi), min=0.0)
    lQ = torch.clamp(bQ_lo - torch.minimum(tp_hi, CQ_hi), min=0.0)
    lo_closed = 0.5 * (d_B + torch.maximum(gap_W, lP + lQ))

    # ---- lower end, exact capped W-minimum at the nominal values minus a Lipschitz slack for η ----------------
    nP, nQ = mP.sum(1), mQ.sum(1)
    CP = s(mP, torch.minimum(pl, cq[:, None]))
    CQ = s(mQ, torch.minimum(ql, cp[:, None]))
    Xmax = torch.minimum(tq, nP * cq)
    Zmax = torch.minimum(tp, nQ * cp)
    wmin = _wmin_exact(aP, bQ, tp, tq, CP, CQ, Xmax, Zmax)
    # |Δ| of every parameter over the η-box; f is 1-Lipschitz in a, b, t_p, t_q, 2-Lipschitz in C_P, C_Q and
    # in the box ends (slope of g plus slope of |·|), so the true minimum is ≥ wmin − slack.
    dtp, dtq = tp_hi - tp_lo, tq_hi - tq_lo
    dcp, dcq = torch.maximum(dtau_p, dtp), torch.maximum(dtau_q, dtq)
    daP, dbQ = aP_hi - aP_lo, bQ_hi - bQ_lo
    dCP, dCQ = daP + nP * dcq, dbQ + nQ * dcp
    dX, dZ = torch.maximum(dtq, nP * dcq), torch.maximum(dtp, nQ * dcp)
    slack = daP + dbQ + dtp + dtq + 2.0 * (dCP + dCQ + dX + dZ)
    lo_exact = 0.5 * (d_B + torch.clamp(wmin - slack, min=0.0))
    lo = torch.clamp(torch.maximum(lo_closed, lo_exact), min=0.0)
    lo = torch.minimum(lo, hi)  # only ever lowers lo (widens), never narrows

    # ---- KL(p‖q) bounds (§5.3) -------------------------------------------------------------------------------
    # Coarsening lower bound Σ_B p log(p/q) + p_W log(p_W/q_W), made robust by minimising each cell's term
    # h(p, q) = p log(p/q) separately over its box: q = q⁺, p = clamp(q⁺/e, p⁻, p⁺) (h is convex in p).
    def hmin(p_lo, p_hi, q_hi):
        pstar = torch.minimum(torch.maximum(q_hi / math.e, p_lo), p_hi)
        return torch.where(pstar > 0, pstar * (torch.log(pstar.clamp(min=1e-300)) - torch.log(q_hi.clamp(min=1e-300))),
                           torch.zeros_like(pstar))

    kl_coarse = hmin(pa_lo, pa_hi, qb_hi) + (mB * hmin(pl_lo, pl_hi, qp_hi)).sum(1) + hmin(pW_lo, pW_hi, qW_hi)
    kl_lo = torch.clamp(torch.maximum(kl_coarse, 2.0 * lo * lo), min=0.0)
    # Finite upper bound only if no p-mass can sit where q is unknown (p_W⁺ = 0): then KL = Σ_B p log(p/q), whose
    # per-term maximum over the box is at an end of the p-interval with q = q⁻. Rare, so computed on those rows only.
    kl_hi = inf.clone()
    fin = pW_hi <= 0.0
    if bool(fin.any()):
        def hmax(p_lo, p_hi, q_lo):
            lq = torch.log(q_lo.clamp(min=1e-300))
            return torch.maximum(p_lo * (torch.log(p_lo.clamp(min=1e-300)) - lq),
                                 p_hi * (torch.log(p_hi.clamp(min=1e-300)) - lq))

        kl_hi[fin] = hmax(pa_lo[fin], pa_hi[fin], qb_lo[fin]) + \
            (mB[fin] * hmax(pl_lo[fin], pl_hi[fin], qp_lo[fin])).sum(1)

    bad = err != 0
    lo = torch.where(bad, zeros, lo)
    hi = torch.where(bad, torch.ones_like(hi), hi)
    kl_lo = torch.where(bad, zeros, kl_lo)
    kl_hi = torch.where(bad, inf, kl_hi)
    return IntervalResult(lo, hi, err, kl_lo, kl_hi)


def _prepare(p_ids, p_lp, q_ids, q_lp, y, a, b):
    p_ids, q_ids, y = _ids(p_ids), _ids(q_ids), _ids(y)
    p_lp, q_lp, a, b = _f64(p_lp), _f64(q_lp), _f64(a), _f64(b)
    lead = y.shape
    if p_ids.shape != p_lp.shape or q_ids.shape != q_lp.shape:
        raise ValueError("ids and log-probs of a list must have the same shape")
    if p_ids.shape[:-1] != lead or q_ids.shape[:-1] != lead or a.shape != lead or b.shape != lead:
        raise ValueError(f"shapes disagree: lists {tuple(p_ids.shape)}/{tuple(q_ids.shape)}, sampled {tuple(lead)}")
    return p_ids, p_lp, q_ids, q_lp, y, a, b, lead


def tv_interval_topk(p_ids, p_lp, q_ids, q_lp, sampled_id, logp_roll_y, logp_train_y, *, caps: bool = True,
                     precision: str | None = "exact", eta=None, block_rows: int = BLOCK_ROWS) -> IntervalResult:
    """Certified TV interval, KL bounds and data-error flags over ``[..., K]`` lists (§5.2 Theorem A, §5.3, §5.5).

    ``precision`` ∈ {"exact", "fp64", "fp32", "fp16", "bf16"} or an explicit ``eta`` (log-space error per logged
    value) widens the interval so it contains the TV of every pair consistent with the logged values up to η.
    Returns :class:`IntervalResult` ``(lo, hi, err, kl_lo, kl_hi)`` with the leading shape of ``sampled_id``.
    """
    p_ids, p_lp, q_ids, q_lp, y, a, b, lead = _prepare(p_ids, p_lp, q_ids, q_lp, sampled_id, logp_roll_y,
                                                       logp_train_y)
    Kp, Kq = p_ids.shape[-1], q_ids.shape[-1]
    n = y.numel()
    p_ids, p_lp = p_ids.reshape(n, Kp), p_lp.reshape(n, Kp)
    q_ids, q_lp = q_ids.reshape(n, Kq), q_lp.reshape(n, Kq)
    y, a, b = y.reshape(-1), a.reshape(-1), b.reshape(-1)
    eta_p = eta_from_precision(p_lp, precision, eta)
    eta_q = eta_from_precision(q_lp, precision, eta)
    eta_a = eta_from_precision(a, precision, eta)
    eta_b = eta_from_precision(b, precision, eta)
    N = y.shape[0]
    parts = []
    for s in range(0, N, block_rows):
        sl = slice(s, s + block_rows)
        parts.append(_interval_rows(p_ids[sl], p_lp[sl], q_ids[sl], q_lp[sl], y[sl], a[sl], b[sl], caps,
                                    eta_p[sl], eta_q[sl], eta_a[sl], eta_b[sl]))
    if not parts:
        e = torch.zeros(0, dtype=torch.float64)
        parts = [IntervalResult(e, e, torch.zeros(0, dtype=torch.int32), e, e)]
    return IntervalResult(*(torch.cat(t).reshape(lead) for t in zip(*parts)))


def tv_interval_batch(p_topk_ids, p_topk_logprobs, q_topk_ids, q_topk_logprobs, sampled_id, p_sampled_logprob,
                      q_sampled_logprob, *, topk_caps: bool = True, precision: str | None = "exact", eta=None,
                      return_status: bool = False):
    """Vectorised :func:`tv_interval` over ``[B, T, K]`` lists (any leading shape; id −1 = padding).

    Returns ``(lo, hi)`` float64 tensors of shape ``[B, T]`` (fail closed: 0 / 1 where the input is bad), or
    ``(lo, hi, err)`` with ``return_status=True`` (``err`` = int32 flags, see :data:`ERR_REASONS`).
    """
    r = tv_interval_topk(p_topk_ids, p_topk_logprobs, q_topk_ids, q_topk_logprobs, sampled_id, p_sampled_logprob,
                         q_sampled_logprob, caps=topk_caps, precision=precision, eta=eta)
    return (r.lo, r.hi, r.err) if return_status else (r.lo, r.hi)


def _as_list_tensors(ids, lps):
    ids = list(ids)
    lps = list(lps)
    if len(ids) != len(lps):
        raise ValueError("a top-K list has different numbers of ids and log-probs")
    return torch.tensor([ids], dtype=torch.int64).reshape(1, len(ids)), \
        torch.tensor([lps], dtype=torch.float64).reshape(1, len(lps))


def tv_interval(p_topk_ids, p_topk_logprobs, q_topk_ids, q_topk_logprobs, sampled_id, p_sampled_logprob,
                q_sampled_logprob, *, topk_caps: bool = True) -> tuple[float, float]:
    """Certified interval ``(lo, hi)`` for the token TV at one position (§5.2 Theorem A, exact arithmetic).

    p = rollout, q = trainer. Each list is that side's K most likely tokens, descending (K may be 0 and differ);
    the sampled token's two log-probs are passed separately (where it is listed, the values must agree).
    ``topk_caps=False`` when the lists are arbitrary subsets (no cap on unlisted mass is then assumed).
    Raises :class:`DataError` (a ``ValueError``) for input that cannot be certified.
    """
    pi, pl = _as_list_tensors(p_topk_ids, p_topk_logprobs)
    qi, ql = _as_list_tensors(q_topk_ids, q_topk_logprobs)
    r = tv_interval_topk(pi, pl, qi, ql, torch.tensor([int(sampled_id)]),
                         torch.tensor([float(p_sampled_logprob)], dtype=torch.float64),
                         torch.tensor([float(q_sampled_logprob)], dtype=torch.float64), caps=topk_caps)
    if int(r.err[0]):
        raise DataError(int(r.err[0]))
    return float(r.lo[0]), float(r.hi[0])


def kl_bounds(p_ids, p_lp, q_ids, q_lp, sampled_id, logp_roll_y, logp_train_y, *, q_full_logp=None,
              caps: bool = True, precision: str | None = "exact", eta=None):
    """Certified ``(kl_lo, kl_hi)`` for KL(p‖q) (§5.3). Lower: max(coarsened KL over B ∪ {W}, Pinsker 2·TV_lo²).
    Upper: +∞ from top-K lists (no finite bound exists without assumptions); with the trainer's full log-probs
    ``q_full_logp`` ``[..., V]`` the finite Theorem-B vertex bound of :func:`tv_interval_fullq` (η = 0 only)."""
    if q_full_logp is not None:
        r = tv_interval_fullq(p_ids, p_lp, q_full_logp, sampled_id, logp_roll_y, caps=caps)
        return r["kl_lo"], r["kl_hi"]
    r = tv_interval_topk(p_ids, p_lp, q_ids, q_lp, sampled_id, logp_roll_y, logp_train_y, caps=caps,
                         precision=precision, eta=eta)
    return r.kl_lo, r.kl_hi


def tv_interval_fullq(roll_ids, roll_logp, train_logp, sampled_id, logp_roll_y, *, caps: bool = True,
                      exact_hi: bool = False) -> dict:
    """Theorem B (§5.2): the trainer's full distribution q (log-probs ``[..., V]``) and the engine's top-K only.

    B = S_p = engine list ∪ {y}, W = V \\ S_p, t_p = p_W, c = min(τ_p, t_p) (caps) or t_p:

        TV_lo = ½[D_B + t_p + q_W − 2·min(t_p, Σ_W min(q_j, c))]                           (exact)
        TV_hi = ½[D_B + t_p + q_W − 2·O_min]  (``exact_hi``: O_min from pouring t_p, ≤ c per id, onto W in
                increasing q; otherwise O_min = 0, i.e. 1 − Σ_B min(p_i, q_i), conservative and sort-free)
        KL_lo = max(Σ_B p log(p/q) + t_p log(t_p/q_W), 2·TV_lo²),
        KL_hi = Σ_B p log(p/q) + Σ_k x_k log(x_k/q_(k)) with the same greedy pour (convex max at a vertex, §5.3).

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
    pfull.scatter_(1, y_c[:, None], torch.where(y_listed, pfull.gather(1, y_c[:, None])[:, 0],
                                                torch.exp(a.clamp(max=0.0)))[:, None])
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
    hi = 0.5 * (D_B + t_p + q_W - 2.0 * o_min) if exact_hi else torch.clamp(
        1.0 - torch.minimum(pS, qS).sum(1), 0.0, 1.0)
    hi = torch.clamp(hi, 0.0, 1.0)
    lo = torch.minimum(torch.clamp(lo, min=0.0), hi)
    kl_B = torch.where(pS > 0, pS * (torch.log(pS.clamp(min=1e-300)) - torch.log(qS.clamp(min=1e-300))),
                       torch.zeros_like(q)).sum(1)
    kl_Wc = torch.where(t_p > 0, t_p * (torch.log(t_p.clamp(min=1e-300)) - torch.log(q_W.clamp(min=1e-300))),
                        torch.zeros_like(t_p))
    kl_lo = torch.maximum(kl_B + kl_Wc, 2.0 * lo * lo).clamp(min=0.0)
    tail = torch.where(x > 0, x * (torch.log(x.clamp(min=1e-300)) - torch.log(qW_sorted.clamp(min=1e-300))),
                       torch.zeros_like(x)).sum(1)
    kl_hi = kl_B + tail
    bad = err != 0
    out = {
        "lo": torch.where(bad, 0.0, lo), "hi": torch.where(bad, 1.0, hi),
        "kl_lo": torch.where(bad, 0.0, kl_lo), "kl_hi": torch.where(bad, math.inf, kl_hi), "err": err,
    }
    return {k_: v.reshape(lead) for k_, v in out.items()}


def exact_tv_kl(p_logp, q_logp):
    """Exact ``(TV, KL(p‖q))`` from full log-probs ``[..., V]`` (§5.1 (iii)): TV = ½Σ|p − q|, KL = Σ p(log p − log q)."""
    p_logp, q_logp = _f64(p_logp), _f64(q_logp)
    p, q = torch.exp(p_logp), torch.exp(q_logp)
    tv = 0.5 * (p - q).abs().sum(-1)
    kl = torch.where(p > 0, p * (p_logp - q_logp), torch.zeros_like(p)).sum(-1)
    return tv, kl
