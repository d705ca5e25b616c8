"""Two-sided token-TV intervals and KL bounds from partial information (spec/certificates.md §5.2, §5.3, §5.5).

p = π_roll (rollout / engine, the distribution the token was sampled from), q = π_θ (trainer).
Inputs per position: each side's top-K list (ids, log-probs, descending, K may be 0 and may differ) and the
sampled token y with both log-probs a = log p(y), b = log q(y).

Sets (§5.2): S_p = engine list ∪ {y}, S_q = trainer list ∪ {y}, B = S_p ∩ S_q (always ∋ y), W = V \\ B,
P = S_p \\ B, Q = S_q \\ B. D_B = Σ_B|p_i − q_i|, p_W = 1 − Σ_B p_i, a_P = Σ_P p_i, b_Q = Σ_Q q_j,
t_p = 1 − Σ_{S_p} p_i, t_q likewise; top-K caps c_p = min(τ_p, t_p), c_q = min(τ_q, t_q) (τ = the K-th listed value).

Theorem A:  TV ∈ [½(D_B + max(|p_W − q_W|, ℓ_P + ℓ_Q, exact capped W-minimum)),  1 − Σ_B min(p_i, q_i)].

Caps (§5.2) need a list to be that side's true top-K; ``caps`` is a bool for both sides or a pair (roll, train):
fcr/1 trainer lists are the trainer's values on ids covering the rollout's (spec/fidelity.md §4.2), not its top-K.

Tensor layout: lists are ``[..., K]`` with id ``-1`` marking an absent (padding) entry; padding must be trailing.
Everything is float64, vectorised over positions (no Python loop per token): ``tv_interval_topk`` runs a numpy
kernel over blocks of rows in column layout (:func:`_interval_block`); tests/certify/slow_reference.py is the same
mathematics written position by position, and the two agree within 1e-12.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from workers.certify.robust import NORM_SLACK, UNIT_ROUNDOFF, eta_from_precision

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
BLOCK_ROWS = 1 << 12  # rows per vectorised block: the [K, rows] temporaries stay in the L2 cache at K = 20
_LOG_TINY = math.log(1e-300)


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


# ---- the vectorised kernel (numpy, column layout) ----------------------------------------------------------------
# One block of n positions is processed with every list transposed to [K, n] (entry k of every row contiguous), so
# each elementwise step is one long SIMD loop and every reduction over the list runs across rows (numpy's exp/log
# are the SVML AVX-512 versions, ≈ 3× faster than torch's here). Membership of the engine's ids in the trainer's
# list is one [K_p, K_q, n] byte comparison; the matching trainer entry is found by a weighted byte sum and gathered
# from the flat trainer arrays. Work that only matters for some rows (P or Q non-empty: caps and the exact capped
# minimum; an unlisted sampled token: the cap check; p_W⁺ = 0: the finite KL upper bound; input errors) runs on those
# rows only.


def _t(x, dtype=None):
    """[n, K] → C-contiguous [K, n] (optionally cast)."""
    if dtype is None or np.dtype(dtype) == x.dtype:
        return np.ascontiguousarray(x.T)
    return x.T.astype(dtype, order="C")


def _eta_np(x, k, nu):
    """η = k·|ℓ| + ν (k = u/(1−u)); non-finite values get η = ν (they are data errors anyway)."""
    if k == 0.0:
        return np.full(x.shape, nu)
    e = np.abs(x)
    e *= k
    if not np.isfinite(e).all():
        e = np.nan_to_num(e, nan=0.0, posinf=0.0)
    if nu:
        e += nu
    return e


def _set(err, mask, flag):
    if mask.any():
        err[mask] |= flag


def _col_checks(I, R, v, allv, E, sorted_required, rows_ids):
    """Per-row flags of one side's list in column layout (same rules as :func:`_list_checks`); ``rows_ids`` is the
    same list in row layout [n, K], used for the duplicate test (a row-wise sort, then neighbours compared)."""
    K, n = I.shape
    err = np.zeros(n, np.int32)
    if K == 0:
        return err
    if K > 1:
        if not allv:
            _set(err, (~v[:-1] & v[1:]).any(0), ERR_PADDING)
        if sorted_required:
            tol = np.add(R[:-1], E[1:])
            tol += E[:-1]
            tol += 1e-12
            viol = R[1:] > tol
            if not allv:
                viol &= v[:-1] & v[1:]
            _set(err, viol.any(0), ERR_UNSORTED)
        D = rows_ids if allv else np.where(rows_ids >= 0, rows_ids, (-1 - np.arange(K, dtype=rows_ids.dtype)))
        srt = np.sort(D, axis=1).ravel()
        eq = srt[1:] == srt[:-1]
        eq[K - 1::K] = False  # the last entry of a row against the first of the next
        if eq.any():
            err[np.unique(np.flatnonzero(eq) // K)] |= ERR_DUPLICATE
    vals = R if allv else np.where(v, R, 0.0)
    s = vals.sum(0)
    bad = ~np.isfinite(s)
    if bad.any():  # screen (a sum of finite values can overflow): exact test on the candidates
        cand = np.flatnonzero(bad)
        _set_at(err, cand, (~np.isfinite(vals[:, cand])).any(0), ERR_NONFINITE)
    _set(err, np.fmax.reduce(vals, axis=0) > POS_TOL, ERR_POSITIVE)
    return err


def _set_at(err, rows, mask, flag):
    if mask.any():
        err[rows[mask]] |= flag
def _wmin_exact(aP, bQ, tp, tq, CP, CQ, Xmax, Zmax):
    """Exact capped minimum of the W-part (§5.2, Theorem A "with caps"):

        min_{X∈[0,X_max], Z∈[0,Z_max]}  g_P(X) + g_Q(Z) + |t_p − t_q + X − Z|,
        g_P(X) = a − X + 2·(X − C_P)₊,  g_Q(Z) = b − Z + 2·(Z − C_Q)₊

    (X = unknown q-mass on P, Z = unknown p-mass on Q). The function is convex piecewise linear, so the minimum
    is attained on the finite candidate set of its breakpoints: X ∈ {0, X_max, min(C_P, X_max)} ×
    Z ∈ {0, Z_max, min(C_Q, Z_max)}, plus the diagonal points (X, clip(X + t_p − t_q)), (clip(Z − t_p + t_q), Z).
    """
    n = Xmax.shape[0]
    xs = np.stack([np.zeros_like(Xmax), Xmax, np.minimum(CP, Xmax)], -1)   # [n, 3]
    zs = np.stack([np.zeros_like(Zmax), Zmax, np.minimum(CQ, Zmax)], -1)
    d = (tp - tq)[:, None]
    X = np.concatenate([np.broadcast_to(xs[:, :, None], (n, 3, 3)).reshape(n, 9), xs,
                        np.minimum(np.maximum(zs - d, 0.0), Xmax[:, None])], 1)
    Z = np.concatenate([np.broadcast_to(zs[:, None, :], (n, 3, 3)).reshape(n, 9),
                        np.minimum(np.maximum(xs + d, 0.0), Zmax[:, None]), zs], 1)
    g = (aP[:, None] - X + 2.0 * np.maximum(X - CP[:, None], 0.0)
         + bQ[:, None] - Z + 2.0 * np.maximum(Z - CQ[:, None], 0.0)
         + np.abs(d + X - Z))
    return g.min(1)



def _position(mask):
    """Per column of a [K, n] bool mask: (index of its True entry, −1 if none; number of True entries). The index
    is only meaningful where the count is 1 (byte sums on 8-byte words when no carry can occur)."""
    K, n = mask.shape
    if K == 0:
        return np.full(n, -1), np.zeros(n, np.int64)
    if n % 8 == 0 and K * (K + 1) // 2 <= 255:
        W = mask.view(np.uint64)
        cnt = W.sum(0).view(np.uint8)
        pos = (W * np.arange(1, K + 1, dtype=np.uint64)[:, None]).sum(0).view(np.uint8).astype(np.intp) - 1
    else:
        cnt = mask.sum(0)
        pos = (mask * np.arange(1, K + 1)[:, None]).sum(0) - 1
    return pos, cnt


def _box(e, L, E, exact, big_possible=True):
    """η-box ``(lo, hi)`` of probabilities ``e = exp(L)`` with log-space errors ``E`` (§5.5): [e·e^{−η}, min(e·e^{η}, 1)].
    For η ≤ 1 the polynomial box [e(1 − η), min(e(1 + η + η²), 1)] ⊇ the exact one (e^{−η} ≥ 1 − η, e^{η} ≤ 1 + η + η²)
    and costs a multiply instead of two exp passes; larger η use the exponentials."""
    if exact:
        return e, e
    lo = np.subtract(1.0, E)
    lo *= e
    hi = np.multiply(E, E)
    hi += E
    hi += 1.0
    hi *= e
    np.minimum(hi, 1.0, out=hi)
    if not big_possible:
        return lo, hi
    big = E > 1.0
    if big.any():
        lo = np.where(big, np.exp(L - E), lo)
        hi = np.where(big, np.minimum(np.exp(L + E), 1.0), hi)
    return lo, hi


def _hmin(p_lo, p_hi, q_hi):
    """min of h(p, q) = p·log(p/q) over the box (q = q⁺; h is convex in p, minimum at p = q/e clipped)."""
    pstar = np.minimum(np.maximum(q_hi / math.e, p_lo), p_hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = pstar * (np.log(np.maximum(pstar, 1e-300)) - np.log(np.maximum(q_hi, 1e-300)))
    return np.where(pstar > 0, h, 0.0)


def _hmax(p_lo, p_hi, q_lo):
    lq = np.log(np.maximum(q_lo, 1e-300))
    return np.maximum(p_lo * (np.log(np.maximum(p_lo, 1e-300)) - lq), p_hi * (np.log(np.maximum(p_hi, 1e-300)) - lq))


def _sanitize(R, v, allv):
    """NaN → 0, −inf → −800, +inf and positive values → 0, padding → −800 (flagged rows are overwritten later)."""
    x = R if np.isfinite(R).all() else np.nan_to_num(R, nan=0.0, neginf=-800.0)
    x = np.minimum(x, 0.0)
    return x if allv else np.where(v, x, -800.0)


def _interval_block(pI, pR, qI, qR, y, a, b, caps_p, caps_q, k_eta, nu, Ep=None, Eq=None, Ea=None, Eb=None,
                    p_rows=None, q_rows=None):
    """Theorem A with η-robust widening on one block in column layout: lists [K, n], sampled quantities [n].

    Returns numpy ``(lo, hi, err, kl_lo, kl_hi)``. ``Ep``… are explicit η arrays, or None for η = k·|ℓ| + ν.
    ``p_rows``/``q_rows``: the id lists in row layout (for the duplicate test). Formulas (§5.2, §5.5), with x⁻/x⁺
    the box ends of every probability:
        TV_hi = 1 − min(p_y⁻, q_y⁻) − Σ_B min(p_i⁻, q_i⁻)
        TV_lo = ½[Σ_{B∪{y}} d_i⁻ + max(|p_W − q_W|⁻, ℓ_P⁻ + ℓ_Q⁻, exact capped W-minimum − Lipschitz slack)]
    The exact capped minimum only differs from the closed form where P or Q is non-empty; with P = Q = ∅ it is
    |t_p − t_q| − 3(Δt_p + Δt_q) ≤ |p_W − q_W|⁻, so it is evaluated on those rows only.
    """
    Kp, n = pR.shape
    Kq = qR.shape[0]
    vp, vq = pI >= 0, qI >= 0
    allp, allq = bool(vp.all()), bool(vq.all())
    precision_eta = Ep is None
    Lp, Lq = _sanitize(pR, vp, allp), _sanitize(qR, vq, allq)
    a_raw, b_raw = a, b
    a = np.minimum(np.nan_to_num(a, nan=0.0, neginf=-800.0), 0.0)
    b = np.minimum(np.nan_to_num(b, nan=0.0, neginf=-800.0), 0.0)
    if precision_eta:
        Ep, Eq, Ea, Eb = (_eta_np(x, k_eta, nu) for x in (pR, qR, a_raw, b_raw))
        exact = not (k_eta or nu)
        big_possible = not exact and max(float(E.max()) if E.size else 0.0 for E in (Ep, Eq, Ea, Eb)) > 1.0
    else:
        exact = not (Ep.any() or Eq.any() or Ea.any() or Eb.any())
        big_possible = True
    err = _col_checks(pI, pR, vp, allp, Ep, caps_p, p_rows) | _col_checks(qI, qR, vq, allq, Eq, caps_q, q_rows)
    _set(err, ~(np.isfinite(a_raw) & np.isfinite(b_raw)), ERR_NONFINITE)
    _set(err, (a_raw > POS_TOL) | (b_raw > POS_TOL), ERR_POSITIVE)
    ybad = y < 0
    _set(err, ybad, ERR_BAD_ID)

    # ---- membership -------------------------------------------------------------------------------------------
    any_ybad = bool(ybad.any())
    p_is_y = pI == y
    q_is_y = qI == y
    if not allp or any_ybad:
        p_is_y &= vp
    if not allq or any_ybad:
        q_is_y &= vq
    p_y_pos, p_y_cnt = _position(p_is_y)
    q_y_pos, q_y_cnt = _position(q_is_y)
    p_y_listed, q_y_listed = p_y_cnt > 0, q_y_cnt > 0
    if Kp and Kq:
        pkey = np.where(p_is_y, -1, pI) if allp else np.where(vp & ~p_is_y, pI, -1)
        qkey = qI if allq else np.where(vq, qI, -2)
        M = pkey[:, None, :] == qkey[None, :, :]
        # trainer entry + 1 of each engine entry (0 = not listed): a weighted byte sum over the trainer axis, done on
        # 8-byte words (no carries while Σ j ≤ 255) where the row count allows
        if n % 8 == 0 and Kq * (Kq + 1) // 2 <= 255:
            W = M.view(np.uint64)
            idx = (W * np.arange(1, Kq + 1, dtype=np.uint64)[None, :, None]).sum(1).view(np.uint8)
            in_p = np.bitwise_or.reduce(W, axis=0).view(bool)
        else:
            wt = np.uint8 if Kq < 255 else np.uint16
            idx = (M.view(np.uint8) * np.arange(1, Kq + 1, dtype=wt)[None, :, None]).sum(1, dtype=wt)
            in_p = M.any(0)
        in_q = idx > 0
        # flat gather; not-listed entries (idx 0) land on an appended −800 (probability 0) block with η 0
        flat = np.minimum(idx, Kq).astype(np.intp)
        flat *= n
        flat += np.arange(-n, 0)
        L_qp = np.take(np.concatenate([Lq.ravel(), np.full(n, -800.0)]), flat)
        E_qp = np.take(np.concatenate([Eq.ravel(), np.zeros(n)]), flat)
    else:
        in_q = np.zeros((Kp, n), bool)
        in_p = np.zeros((Kq, n), bool)
        L_qp = np.full((Kp, n), -800.0)
        E_qp = np.zeros((Kp, n))
    # The sampled token's list entries must agree with the separately passed values.
    for is_y, pos, cnt, L, E, s_v, E_s in ((p_is_y, p_y_pos, p_y_cnt, Lp, Ep, a, Ea),
                                           (q_is_y, q_y_pos, q_y_cnt, Lq, Eq, b, Eb)):
        if not cnt.any():
            continue
        if cnt.max() > 1:  # a duplicated sampled id (already a data error): the largest deviation, as the rule says
            dev = np.where(is_y, np.abs(L - s_v) - E - E_s, -1.0).max(0)
        else:
            at = np.maximum(pos, 0) * n + np.arange(n)
            dev = np.where(cnt > 0, np.abs(np.take(L, at) - s_v) - np.take(E, at) - E_s, -1.0)
        _set(err, dev > AGREE_TOL, ERR_SAMPLED_MISMATCH)

    # ---- probabilities and their η-boxes (engine list with its sampled-token entry removed: that one is a/p_y) ---
    mP = vp & ~in_q & ~p_is_y
    mQ = vq & ~in_p & ~q_is_y
    has_P, has_Q = bool(mP.any()), bool(mQ.any())
    LpB = np.where(p_is_y, -800.0, Lp) if p_y_listed.any() else Lp
    plB, qp = np.exp(LpB), np.exp(L_qp)
    pa, qb = np.exp(a), np.exp(b)
    pl_lo, pl_hi = _box(plB, LpB, Ep, exact, big_possible)
    qp_lo, qp_hi = _box(qp, L_qp, E_qp, exact, big_possible)
    pa_lo, pa_hi = _box(pa, a, Ea, exact, big_possible)
    qb_lo, qb_hi = _box(qb, b, Eb, exact, big_possible)
    zero = np.zeros(n)
    ql = ql_lo = ql_hi = None
    if has_Q or (caps_q and Kq > 0 and (has_P or bool((~q_y_listed).any()))):
        ql = np.exp(Lq)
        ql_lo, ql_hi = _box(ql, Lq, Eq, exact, big_possible)

    def sB(x):
        # With P = ∅ every engine entry except the (removed) sampled one is in B and unmatched entries are 0.
        return np.where(in_q, x, 0.0).sum(0) if has_P else x.sum(0)

    def sP(x):
        return np.where(mP, x, 0.0).sum(0) if has_P else zero

    def sQ(x):
        return np.where(mQ, x, 0.0).sum(0) if has_Q else zero

    # ---- upper end: TV_hi = 1 − Σ_B min(p_i⁻, q_i⁻) --------------------------------------------------------------
    hi = np.clip(1.0 - (np.minimum(pa_lo, qb_lo) + sB(np.minimum(pl_lo, qp_lo))), 0.0, 1.0)

    # ---- sums over S_p = B ∪ P, S_q = B ∪ Q --------------------------------------------------------------------
    sBp_lo, sBq_lo = pa_lo + sB(pl_lo), qb_lo + sB(qp_lo)
    sBp_hi, sBq_hi = (sBp_lo, sBq_lo) if exact else (pa_hi + sB(pl_hi), qb_hi + sB(qp_hi))
    aP_lo, bQ_lo = sP(pl_lo), sQ(ql_lo) if has_Q else zero
    aP_hi, bQ_hi = (aP_lo, bQ_lo) if exact else (sP(pl_hi), sQ(ql_hi) if has_Q else zero)
    _set(err, (sBp_lo + aP_lo > 1.0 + SUM_TOL) | (sBq_lo + bQ_lo > 1.0 + SUM_TOL), ERR_MASS)
    tp_hi, tq_hi = np.maximum(1.0 - sBp_lo - aP_lo, 0.0), np.maximum(1.0 - sBq_lo - bQ_lo, 0.0)
    tp_lo, tq_lo = np.maximum(1.0 - sBp_hi - aP_hi, 0.0), np.maximum(1.0 - sBq_hi - bQ_hi, 0.0)

    # ---- lower end, closed form with worst-case inputs (§5.5): ½[Σ_B d⁻ + max(|p_W − q_W|⁻, ℓ_P⁻ + ℓ_Q⁻)] -------------
    d_y = np.maximum(np.maximum(pa_lo - qb_hi, qb_lo - pa_hi), 0.0)
    d_B = d_y + sB(np.maximum(np.maximum(pl_lo - qp_hi, qp_lo - pl_hi), 0.0))
    pW_lo, pW_hi = np.clip(1.0 - sBp_hi, 0.0, 1.0), np.clip(1.0 - sBp_lo, 0.0, 1.0)
    qW_lo, qW_hi = np.clip(1.0 - sBq_hi, 0.0, 1.0), np.clip(1.0 - sBq_lo, 0.0, 1.0)
    gap_W = np.maximum(np.maximum(pW_lo - qW_hi, qW_lo - pW_hi), 0.0)
    lo = 0.5 * (d_B + gap_W)

    # ---- top-K caps τ (the K-th listed value bounds every unlisted value) and the cap check ------------------------
    caps_info = {}
    for side, caps_s, v, allv, K_s, y_listed, s_v, E_s in (("p", caps_p, vp, allp, Kp, p_y_listed, a, Ea),
                                                            ("q", caps_q, vq, allq, Kq, q_y_listed, b, Eb)):
        if not caps_s or K_s == 0:
            continue
        k_s = np.full(n, K_s) if allv else v.sum(0)
        check = bool((~y_listed & (k_s > 0)).any())
        if not (has_P or has_Q or check):
            continue
        if side == "p":  # the full engine list, sampled-token entry included
            e = np.exp(Lp)
            e_lo, e_hi = _box(e, Lp, Ep, exact, big_possible)
        else:
            e, e_lo, e_hi = ql, ql_lo, ql_hi
        tau = (e if allv else np.where(v, e, np.inf)).min(0)
        tau_hi = (e_hi if allv else np.where(v, e_hi, np.inf)).min(0)
        if check:
            with np.errstate(divide="ignore"):
                above = ~y_listed & (k_s > 0) & (s_v - E_s > np.log(tau_hi) + AGREE_TOL)
            _set(err, above, ERR_SAMPLED_ABOVE_CAP)
        dtau = ((e_hi - e_lo) if allv else np.where(v, e_hi - e_lo, 0.0)).max(0)
        caps_info[side] = (tau, tau_hi, dtau)
    pl = plB
    # ---- rows with P or Q non-empty: caps terms ℓ_P, ℓ_Q and the exact capped W-minimum ----------------------------
    if has_P or has_Q:
        sel = np.flatnonzero(mP.any(0) | mQ.any(0))
        nP, nQ = mP[:, sel].sum(0).astype(np.float64), mQ[:, sel].sum(0).astype(np.float64)
        aP, bQ = sP(pl)[sel], sQ(ql)[sel]
        sBp, sBq = (pa + sB(pl))[sel], (qb + sB(qp))[sel]
        tp, tq = np.maximum(1.0 - sBp - aP, 0.0), np.maximum(1.0 - sBq - bQ, 0.0)
        if "p" in caps_info:
            tau_p, tau_p_hi, dtau_p = (x[sel] for x in caps_info["p"])
            cp, cp_hi = np.minimum(tau_p, tp), np.minimum(tau_p_hi, tp_hi[sel])
        else:
            cp, cp_hi, dtau_p = tp, tp_hi[sel], zero[sel]
        if "q" in caps_info:
            tau_q, tau_q_hi, dtau_q = (x[sel] for x in caps_info["q"])
            cq, cq_hi = np.minimum(tau_q, tq), np.minimum(tau_q_hi, tq_hi[sel])
        else:
            cq, cq_hi, dtau_q = tq, tq_hi[sel], zero[sel]
        mPs, mQs = mP[:, sel], mQ[:, sel]
        CP_hi = np.where(mPs, np.minimum(pl_hi[:, sel], cq_hi), 0.0).sum(0)
        CQ_hi = np.where(mQs, np.minimum(ql_hi[:, sel], cp_hi), 0.0).sum(0) if has_Q else zero[sel]
        lP = np.maximum(aP_lo[sel] - np.minimum(tq_hi[sel], CP_hi), 0.0)
        lQ = np.maximum(bQ_lo[sel] - np.minimum(tp_hi[sel], CQ_hi), 0.0)
        dBs = d_B[sel]
        lo_closed = 0.5 * (dBs + np.maximum(gap_W[sel], lP + lQ))
        CP = np.where(mPs, np.minimum(pl[:, sel], cq), 0.0).sum(0)
        CQ = np.where(mQs, np.minimum(ql[:, sel], cp), 0.0).sum(0) if has_Q else zero[sel]
        Xmax, Zmax = np.minimum(tq, nP * cq), np.minimum(tp, nQ * cp)
        wmin = _wmin_exact(aP, bQ, tp, tq, CP, CQ, Xmax, Zmax)
        # |Δ| of every parameter over the η-box; f is 1-Lipschitz in a, b, t_p, t_q, 2-Lipschitz in C_P, C_Q and
        # in the box ends (slope of g plus slope of |·|), so the true minimum is ≥ wmin − slack.
        dtp, dtq = tp_hi[sel] - tp_lo[sel], tq_hi[sel] - tq_lo[sel]
        dcp, dcq = np.maximum(dtau_p, dtp), np.maximum(dtau_q, dtq)
        daP, dbQ = aP_hi[sel] - aP_lo[sel], bQ_hi[sel] - bQ_lo[sel]
        dCP, dCQ = daP + nP * dcq, dbQ + nQ * dcp
        dX, dZ = np.maximum(dtq, nP * dcq), np.maximum(dtp, nQ * dcp)
        slack = daP + dbQ + dtp + dtq + 2.0 * (dCP + dCQ + dX + dZ)
        lo_exact = 0.5 * (dBs + np.maximum(wmin - slack, 0.0))
        lo[sel] = np.maximum(lo_closed, lo_exact)
    lo = np.minimum(np.maximum(lo, 0.0), hi)  # the min only ever lowers lo (widens), never narrows

    # ---- KL(p‖q) bounds (§5.3) -------------------------------------------------------------------------------
    # Coarsening lower bound Σ_B p log(p/q) + p_W log(p_W/q_W), made robust by minimising each cell's term
    # h(p, q) = p log(p/q) separately over its box: q = q⁺, p = clamp(q⁺/e, p⁻, p⁺) (h is convex in p).
    if exact:
        with np.errstate(invalid="ignore"):
            hB = np.where(pl > 0, pl * (np.maximum(Lp, _LOG_TINY) - np.maximum(L_qp, _LOG_TINY)), 0.0)
    else:
        hB = _hmin(pl_lo, pl_hi, qp_hi)
    kl_coarse = _hmin(pa_lo, pa_hi, qb_hi) + sB(hB) + _hmin(pW_lo, pW_hi, qW_hi)
    kl_lo = np.maximum(np.maximum(kl_coarse, 2.0 * lo * lo), 0.0)
    # Finite upper bound only if no p-mass can sit where q is unknown (p_W⁺ = 0): then KL = Σ_B p log(p/q), whose
    # per-term maximum over the box is at an end of the p-interval with q = q⁻. Rare, so computed on those rows only.
    kl_hi = np.full(n, np.inf)
    fin = np.flatnonzero(pW_hi <= 0.0)
    if fin.size:
        with np.errstate(divide="ignore", invalid="ignore"):
            kl_hi[fin] = _hmax(pa_lo[fin], pa_hi[fin], qb_lo[fin]) + np.where(
                in_q[:, fin], _hmax(pl_lo[:, fin], pl_hi[:, fin], qp_lo[:, fin]), 0.0).sum(0)

    bad = err != 0
    if bad.any():
        lo[bad], hi[bad], kl_lo[bad], kl_hi[bad] = 0.0, 1.0, 0.0, np.inf
    return lo, hi, err, kl_lo, kl_hi


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
    of the rollout's ids, not the trainer's own top-K: spec/fidelity.md §4.2)."""
    if isinstance(caps, (tuple, list)):
        if len(caps) != 2:
            raise ValueError("caps must be a bool or a pair (roll, train)")
        return bool(caps[0]), bool(caps[1])
    return bool(caps), bool(caps)


def tv_interval_topk(p_ids, p_lp, q_ids, q_lp, sampled_id, logp_roll_y, logp_train_y, *, caps: bool = True,
                     precision: str | None = "exact", eta=None, block_rows: int = BLOCK_ROWS) -> IntervalResult:
    """Certified TV interval, KL bounds and data-error flags over ``[..., K]`` lists (§5.2 Theorem A, §5.3, §5.5).

    ``precision`` ∈ {"exact", "fp64", "fp32", "fp16", "bf16"} or an explicit ``eta`` (log-space error per logged
    value) widens the interval so it contains the TV of every pair consistent with the logged values up to η
    (precision-based η includes the normalisation slack ν, see :func:`workers.certify.robust.eta_from_precision`).
    ``caps``: True if each list is that side's true top-K (descending; caps τ apply and an unlisted sampled token
    above the K-th value is a data error), False for arbitrary subsets, or a pair ``(roll, train)``.
    Returns :class:`IntervalResult` ``(lo, hi, err, kl_lo, kl_hi)`` with the leading shape of ``sampled_id``.
    """
    caps_p, caps_q = _caps_pair(caps)
    p_ids, p_lp, q_ids, q_lp, y, a, b, lead = _prepare(p_ids, p_lp, q_ids, q_lp, sampled_id, logp_roll_y,
                                                       logp_train_y)
    Kp, Kq = p_ids.shape[-1], q_ids.shape[-1]
    n = y.numel()
    P_I, P_R = p_ids.reshape(n, Kp).contiguous().numpy(), p_lp.reshape(n, Kp).contiguous().numpy()
    Q_I, Q_R = q_ids.reshape(n, Kq).contiguous().numpy(), q_lp.reshape(n, Kq).contiguous().numpy()
    Y, A, B = (t.reshape(-1).contiguous().numpy() for t in (y, a, b))
    # int32 ids when they fit: the [K_p, K_q, n] comparison moves half the bytes
    lim = 2**31 - 1
    small_ids = all(x.size == 0 or (int(x.max()) < lim and int(x.min()) > -lim) for x in (P_I, Q_I, Y))
    idt = np.int32 if small_ids else np.int64
    if eta is None:
        if precision is None:
            precision = "exact"
        if precision not in UNIT_ROUNDOFF:
            raise ValueError(f"precision must be one of {sorted(UNIT_ROUNDOFF)}")
        u = UNIT_ROUNDOFF[precision]
        k_eta, nu = u / (1.0 - u), NORM_SLACK[precision]
        E = None
    else:
        k_eta = nu = 0.0
        E = [eta_from_precision(x, precision, eta).detach().contiguous().numpy()
             for x in (p_lp.reshape(n, Kp), q_lp.reshape(n, Kq), a.reshape(-1), b.reshape(-1))]
    lo, hi, kl_lo, kl_hi = (np.empty(n) for _ in range(4))
    err = np.empty(n, np.int32)
    for s in range(0, n, block_rows):
        sl = slice(s, s + block_rows)
        Es = {} if E is None else dict(Ep=_t(E[0][sl]), Eq=_t(E[1][sl]), Ea=E[2][sl], Eb=E[3][sl])
        pr, qr = P_I[sl].astype(idt, copy=False), Q_I[sl].astype(idt, copy=False)
        r = _interval_block(_t(pr), _t(P_R[sl]), _t(qr), _t(Q_R[sl]), Y[sl].astype(idt, copy=False), A[sl],
                            B[sl], caps_p, caps_q, k_eta, nu, p_rows=pr, q_rows=qr, **Es)
        lo[sl], hi[sl], err[sl], kl_lo[sl], kl_hi[sl] = r
    t = torch.from_numpy
    return IntervalResult(t(lo).reshape(lead), t(hi).reshape(lead), t(err).reshape(lead), t(kl_lo).reshape(lead),
                          t(kl_hi).reshape(lead))


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
    ``topk_caps=False`` when the lists are arbitrary subsets (no cap on unlisted mass is then assumed), or a pair
    ``(roll, train)`` per side (e.g. ``(True, False)``: the trainer list is the trainer's values on some ids).
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
