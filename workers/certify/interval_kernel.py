"""Compiled per-position kernel of Theorem A with η-robust widening and the KL bounds
(docs/intervals.md#tv-interval-from-top-k-lists, docs/intervals.md#kl-bounds, docs/intervals.md#error-robust-widening).
Called through :func:`workers.certify.intervals.tv_interval_topk`, which documents the inputs.

numba compiles :func:`interval_rows` to machine code: one pass over each position's two lists, nothing allocated per
position, results written straight into the caller's output arrays. (The numpy formulation it replaced made ~150
passes over ``[K, n]`` temporaries for the same arithmetic and was 2.4× slower: docs/certify.md, *Benchmark*.)

Notation as in intervals.py: p = engine (rollout) list ∪ {y}, q = trainer list ∪ {y}; B = ids on both lists (the
sampled token y counted apart), P = engine-only ids, Q = trainer-only ids, W = the rest of the vocabulary. Every
logged log-prob ℓ has a box [e^{ℓ−η}, min(e^{ℓ+η}, 1)] (polynomial ends for η ≤ 1, see :func:`_box_lo`).

    TV_hi = 1 − min(p_y⁻, q_y⁻) − Σ_B min(p_i⁻, q_i⁻)
    TV_lo = ½[Σ_{B∪{y}} d_i⁻ + max(|p_W − q_W|⁻, ℓ_P⁻ + ℓ_Q⁻, exact capped W-minimum − Lipschitz slack)]
    KL_lo = max(Σ_{B∪{y}} min_box h + min_box h(p_W, q_W), 2·TV_lo²),  h(p, q) = p log(p/q)
    KL_hi = Σ_{B∪{y}} max_box h  if p_W⁺ = 0, else +∞

tests/certify/slow_reference.py is the same mathematics in plain Python; the two agree within 1e-12
(tests/certify/test_kernel_equivalence.py).

The tolerances of flags.py (SUM_TOL, AGREE_TOL, POS_TOL) are compiled in as constants, and numba's disk cache is
keyed on *this* file only: a change to them must come with an edit here, or cached machine code keeps the old
values. (Last change: both consistency tolerances cut to double rounding, 1e-12.)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from workers.certify.flags import (
    AGREE_TOL,
    ERR_BAD_ID,
    ERR_DUPLICATE,
    ERR_MASS,
    ERR_NONFINITE,
    ERR_PADDING,
    ERR_POSITIVE,
    ERR_SAMPLED_ABOVE_CAP,
    ERR_SAMPLED_MISMATCH,
    ERR_UNSORTED,
    POS_TOL,
    SUM_TOL,
)

ZERO_LOG = -800.0  # a log-value whose exponential is exactly 0.0: padding, and −∞ in bad rows
LOG_TINY = math.log(1e-300)
NOT_LISTED, SAMPLED, PADDING = -1, -2, -3  # codes in ``match`` besides a trainer index ≥ 0


def compiled_kernel(function):
    """Compile with numba, caching the machine code on disk (beside the module, in ``NUMBA_CACHE_DIR``, or in the
    user's cache directory) so later processes load it in ≈ 0.3 s instead of compiling for ≈ 3 s. Where none of
    those is writable (a read-only install run by a user without a home) numba refuses to cache at all: then
    compile in memory, once per process, rather than fail to import."""
    try:
        return njit(cache=True, nogil=True, error_model="numpy")(function)
    except RuntimeError:
        return njit(cache=False, nogil=True, error_model="numpy")(function)


@compiled_kernel
def _eta(x, k_eta, nu):
    """η = k·|ℓ| + ν for a declared precision (k = u/(1−u)); a non-finite value gets ν (it is a data error)."""
    if not math.isfinite(x):
        return nu
    return abs(x) * k_eta + nu


@compiled_kernel
def _clean(x):
    """NaN → 0, −∞ → ZERO_LOG, positive → 0: flagged values only have to be harmless until the row fails closed."""
    if math.isnan(x):
        return 0.0
    if x == -math.inf:
        return ZERO_LOG
    return min(x, 0.0)


@compiled_kernel
def _box_lo(p, L, e):
    """Lower end of e^{[L−η, L+η]} given p = e^L: p(1 − η) for η ≤ 1 (e^{−η} ≥ 1 − η), else e^{L−η}."""
    if e > 1.0:
        return math.exp(L - e)
    return (1.0 - e) * p


@compiled_kernel
def _box_hi(p, L, e):
    """Upper end, capped at 1: p(1 + η + η²) for η ≤ 1 (e^{η} ≤ 1 + η + η²), else e^{L+η}."""
    if e > 1.0:
        return min(math.exp(L + e), 1.0)
    return min((e * e + e + 1.0) * p, 1.0)


@compiled_kernel
def _log1p(x):
    """log(1 + x): five terms of the series for |x| ≤ 2⁻¹² (the rest is below double rounding), else libm.
    The η of fp32 storage is ~1e-5, so the certificate's logarithms of box ends cost a few multiplies."""
    if abs(x) <= 2.0**-12:
        return x * (1.0 - x * (0.5 - x * (1.0 / 3.0 - x * (0.25 - x * 0.2))))
    return math.log1p(x)


@compiled_kernel
def _log_box_lo(L, e):
    """log of :func:`_box_lo` (−∞ where the box reaches 0)."""
    if e > 1.0:
        return L - e
    return L + _log1p(-e)


@compiled_kernel
def _log_box_hi(hi, L, e):
    """log of :func:`_box_hi` ``hi`` (0 where capped at 1)."""
    if hi >= 1.0:
        return 0.0
    if e > 1.0:
        return L + e
    return L + _log1p(e * e + e)


@compiled_kernel
def _hmin_box(p_lo, p_hi, L, e, q_hi, lq_hi):
    """:func:`_hmin` for the box of a logged value L ± η, with the logarithms of the box ends taken from L and η
    (``lq_hi`` = log q_hi) instead of calling log on each end."""
    c = q_hi / math.e
    if c <= p_lo:
        p, lp = p_lo, _log_box_lo(L, e)
    elif c >= p_hi:
        p, lp = p_hi, _log_box_hi(p_hi, L, e)
    else:
        p, lp = c, lq_hi - 1.0
    if p <= 0.0:
        return 0.0
    return p * (max(lp, LOG_TINY) - max(lq_hi, LOG_TINY))


@compiled_kernel
def _hmin(p_lo, p_hi, q_hi):
    """min of h(p, q) = p·log(p/q) over p ∈ [p_lo, p_hi] at q = q_hi (h is convex in p with its minimum at q/e)."""
    p = min(max(q_hi / math.e, p_lo), p_hi)
    if p <= 0.0:
        return 0.0
    return p * (math.log(max(p, 1e-300)) - math.log(max(q_hi, 1e-300)))


@compiled_kernel
def _hmax(p_lo, p_hi, q_lo):
    """max of h over the box: at an end of the p-interval with q = q_lo."""
    lq = math.log(max(q_lo, 1e-300))
    return max(p_lo * (math.log(max(p_lo, 1e-300)) - lq), p_hi * (math.log(max(p_hi, 1e-300)) - lq))


@compiled_kernel
def _list_flags(ids, R, E, sorted_required):
    """Flags of one logged list: padding (id < 0) only at the end, finite non-positive values, descending up to the
    values' η when the list claims to be a top-K (storage rounding is monotone). Duplicates: see :func:`_find`."""
    K = ids.shape[0]
    err = 0
    for k in range(K):
        if ids[k] < 0:
            continue
        if k > 0 and ids[k - 1] < 0:
            err |= ERR_PADDING
        if sorted_required and k > 0 and ids[k - 1] >= 0 and R[k] > R[k - 1] + E[k] + E[k - 1] + 1e-12:
            err |= ERR_UNSORTED
        if not math.isfinite(R[k]):
            err |= ERR_NONFINITE
        if R[k] > POS_TOL:
            err |= ERR_POSITIVE
    return err


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the top bits of id·2⁶⁴/φ spread consecutive ids


@compiled_kernel
def _find(slot_id, stamp, row, shift, i):
    """Slot of id ``i`` in this row's open-addressing table (linear probing), and whether it is already there.
    ``stamp[s] == row`` marks slots filled for this row, so the table is never cleared between rows."""
    mask = slot_id.shape[0] - 1
    s = np.int64((np.uint64(i) * _GOLDEN) >> shift)
    while stamp[s] == row:
        if slot_id[s] == i:
            return s, True
        s = (s + 1) & mask
    return s, False


@compiled_kernel
def _cap(ids, X, L, E, active):
    """Top-K cap of one side (docs/intervals.md#top-k-caps): τ = the smallest listed probability, its box upper
    end, and the widest box
    (Δτ). A side without caps, or with an empty list, has τ = +∞ (no cap) and Δτ = 0."""
    tau, tau_hi, dtau = math.inf, math.inf, 0.0
    if active:
        for k in range(ids.shape[0]):
            if ids[k] >= 0:
                lo, hi = _box_lo(X[k], L[k], E[k]), _box_hi(X[k], L[k], E[k])
                tau = min(tau, X[k])
                tau_hi = min(tau_hi, hi)
                dtau = max(dtau, hi - lo)
    return tau, tau_hi, dtau


@compiled_kernel
def _wmin_exact(aP, bQ, tp, tq, CP, CQ, Xmax, Zmax):
    """Exact capped minimum of the W-part (Theorem A with caps, docs/intervals.md#top-k-caps):

        min_{X∈[0,X_max], Z∈[0,Z_max]}  a − X + 2(X − C_P)₊ + b − Z + 2(Z − C_Q)₊ + |t_p − t_q + X − Z|

    (X = unknown q-mass on P, Z = unknown p-mass on Q). Convex piecewise linear, so the minimum is attained at a
    breakpoint: X ∈ {0, X_max, min(C_P, X_max)} × Z ∈ {0, Z_max, min(C_Q, Z_max)}, plus the diagonal points
    (X, clip(X + t_p − t_q)) and (clip(Z − t_p + t_q), Z)."""
    d = tp - tq
    xs = (0.0, Xmax, min(CP, Xmax))
    zs = (0.0, Zmax, min(CQ, Zmax))
    best = math.inf
    for i in range(3):
        for j in range(5):
            if j < 3:
                X, Z = xs[i], zs[j]
            elif j == 3:
                X, Z = xs[i], min(max(xs[i] + d, 0.0), Zmax)
            else:
                X, Z = min(max(zs[i] - d, 0.0), Xmax), zs[i]
            g = aP - X + 2.0 * max(X - CP, 0.0) + bQ - Z + 2.0 * max(Z - CQ, 0.0) + abs(d + X - Z)
            best = min(best, g)
    return best


@compiled_kernel
def interval_rows(
    P_I,
    P_R,
    P_X,
    Q_I,
    Q_R,
    Q_X,
    Y,
    A,
    B,
    caps_p,
    caps_q,
    k_eta,
    nu,
    explicit,
    E_P,
    E_Q,
    E_A,
    E_B,
    lo_out,
    hi_out,
    err_out,
    kl_lo_out,
    kl_hi_out,
):
    """Fill ``lo_out, hi_out, err_out, kl_lo_out, kl_hi_out`` ``[n]`` for lists ``[n, K]`` (id < 0 = padding).

    ``P_X``, ``Q_X``: ``exp`` of the logged values, computed beforehand over the whole block by numpy (its SIMD
    exponential is several times faster than one call per value); used wherever the logged value is clean (≤ 0).

    η per value: the explicit ``E_*`` arrays when ``explicit``, else k_eta·|ℓ| + ν."""
    n, Kp = P_I.shape
    Kq = Q_I.shape[1]
    Lp, Ep, Xp = np.empty(Kp), np.empty(Kp), np.empty(Kp)  # cleaned log-probs, their η, probabilities
    Lq, Eq, Xq = np.empty(Kq), np.empty(Kq), np.empty(Kq)
    match = np.empty(Kp, np.int64)  # per engine entry: its trainer index (B), NOT_LISTED (P), SAMPLED, PADDING
    q_in_p = np.empty(Kq, np.bool_)
    # ids of both lists in a hash table (≥ 2× as many slots as entries): membership and duplicates in O(K_p + K_q)
    bits = 3
    while (1 << bits) < 2 * (Kp + Kq):
        bits += 1
    shift = np.uint64(64 - bits)
    slot_id = np.empty(1 << bits, np.int64)  # the id held by a slot
    slot_p = np.empty(1 << bits, np.int64)  # its engine-list index, −1 if only on the trainer list
    slot_q = np.empty(1 << bits, np.int64)  # its trainer-list index, −1 if not (yet) seen there
    stamp = np.full(1 << bits, -1, np.int64)
    for r in range(n):
        y = Y[r]
        for k in range(Kp):
            Ep[k] = E_P[r, k] if explicit else _eta(P_R[r, k], k_eta, nu)
        for j in range(Kq):
            Eq[j] = E_Q[r, j] if explicit else _eta(Q_R[r, j], k_eta, nu)
        ea = E_A[r] if explicit else _eta(A[r], k_eta, nu)
        eb = E_B[r] if explicit else _eta(B[r], k_eta, nu)
        err = _list_flags(P_I[r], P_R[r], Ep, caps_p) | _list_flags(Q_I[r], Q_R[r], Eq, caps_q)
        if not (math.isfinite(A[r]) and math.isfinite(B[r])):
            err |= ERR_NONFINITE
        if A[r] > POS_TOL or B[r] > POS_TOL:
            err |= ERR_POSITIVE
        if y < 0:
            err |= ERR_BAD_ID
        a, b = _clean(A[r]), _clean(B[r])

        # ---- membership; a listed sampled token must agree with its separately logged value ---------------------
        for j in range(Kq):
            Lq[j] = _clean(Q_R[r, j]) if Q_I[r, j] >= 0 else ZERO_LOG
            Xq[j] = Q_X[r, j] if Q_R[r, j] <= 0.0 and Q_I[r, j] >= 0 else math.exp(Lq[j])
            q_in_p[j] = False
        p_y_listed, q_y_listed, n_valid_p, n_valid_q = False, False, 0, 0
        for k in range(Kp):
            i = P_I[r, k]
            if i < 0:
                Lp[k], Xp[k], match[k] = ZERO_LOG, 0.0, PADDING
                continue
            n_valid_p += 1
            Lp[k] = _clean(P_R[r, k])
            Xp[k] = P_X[r, k] if P_R[r, k] <= 0.0 else math.exp(Lp[k])
            s, seen = _find(slot_id, stamp, r, shift, i)
            if seen:
                err |= ERR_DUPLICATE
            else:
                stamp[s], slot_id[s], slot_p[s], slot_q[s] = r, i, k, -1
            if i == y:
                match[k] = SAMPLED
                p_y_listed = True
                if abs(Lp[k] - a) - Ep[k] - ea > AGREE_TOL:
                    err |= ERR_SAMPLED_MISMATCH
            else:
                match[k] = NOT_LISTED
        for j in range(Kq):
            i = Q_I[r, j]
            if i < 0:
                continue
            n_valid_q += 1
            s, seen = _find(slot_id, stamp, r, shift, i)
            if not seen:
                stamp[s], slot_id[s], slot_p[s], slot_q[s] = r, i, -1, j
            elif slot_q[s] >= 0:
                err |= ERR_DUPLICATE
            else:
                slot_q[s] = j
                if i != y:  # an engine entry that is not the sampled token: a B cell
                    match[slot_p[s]] = j
                    q_in_p[j] = True
            if i == y:
                q_y_listed = True
                if abs(Lq[j] - b) - Eq[j] - eb > AGREE_TOL:
                    err |= ERR_SAMPLED_MISMATCH

        # ---- sums over B, P, Q of the boxes' ends (and of the logged values, for the exact capped minimum) --------
        pa, qb = math.exp(a), math.exp(b)
        pa_lo, pa_hi, qb_lo, qb_hi = _box_lo(pa, a, ea), _box_hi(pa, a, ea), _box_lo(qb, b, eb), _box_hi(qb, b, eb)
        sB_min = sBp_lo = sBp_hi = sBq_lo = sBq_hi = sBp = sBq = dB = hB = 0.0
        aP_lo = aP_hi = aP = 0.0
        nP = 0
        for k in range(Kp):
            m = match[k]
            if m < 0 and m != NOT_LISTED:
                continue
            pl = Xp[k]
            pl_lo, pl_hi = _box_lo(pl, Lp[k], Ep[k]), _box_hi(pl, Lp[k], Ep[k])
            if m == NOT_LISTED:
                nP += 1
                aP_lo += pl_lo
                aP_hi += pl_hi
                aP += pl
                continue
            qp = Xq[m]
            qp_lo, qp_hi = _box_lo(qp, Lq[m], Eq[m]), _box_hi(qp, Lq[m], Eq[m])
            sB_min += min(pl_lo, qp_lo)
            sBp_lo += pl_lo
            sBp_hi += pl_hi
            sBq_lo += qp_lo
            sBq_hi += qp_hi
            sBp += pl
            sBq += qp
            dB += max(max(pl_lo - qp_hi, qp_lo - pl_hi), 0.0)
            hB += _hmin_box(pl_lo, pl_hi, Lp[k], Ep[k], qp_hi, _log_box_hi(qp_hi, Lq[m], Eq[m]))
        bQ_lo = bQ_hi = bQ = 0.0
        nQ = 0
        for j in range(Kq):
            if Q_I[r, j] < 0 or Q_I[r, j] == y or q_in_p[j]:
                continue
            nQ += 1
            bQ_lo += _box_lo(Xq[j], Lq[j], Eq[j])
            bQ_hi += _box_hi(Xq[j], Lq[j], Eq[j])
            bQ += Xq[j]

        # ---- upper end, mass check, closed-form lower end -------------------------------------------------------
        hi = min(max(1.0 - (min(pa_lo, qb_lo) + sB_min), 0.0), 1.0)
        sBp_lo, sBq_lo = pa_lo + sBp_lo, qb_lo + sBq_lo
        sBp_hi, sBq_hi = pa_hi + sBp_hi, qb_hi + sBq_hi
        if sBp_lo + aP_lo > 1.0 + SUM_TOL or sBq_lo + bQ_lo > 1.0 + SUM_TOL:
            err |= ERR_MASS
        tp_hi, tq_hi = max(1.0 - sBp_lo - aP_lo, 0.0), max(1.0 - sBq_lo - bQ_lo, 0.0)
        tp_lo, tq_lo = max(1.0 - sBp_hi - aP_hi, 0.0), max(1.0 - sBq_hi - bQ_hi, 0.0)
        d_B = max(max(pa_lo - qb_hi, qb_lo - pa_hi), 0.0) + dB
        pW_lo, pW_hi = min(max(1.0 - sBp_hi, 0.0), 1.0), min(max(1.0 - sBp_lo, 0.0), 1.0)
        qW_lo, qW_hi = min(max(1.0 - sBq_hi, 0.0), 1.0), min(max(1.0 - sBq_lo, 0.0), 1.0)
        gap_W = max(max(pW_lo - qW_hi, qW_lo - pW_hi), 0.0)
        lo = 0.5 * (d_B + gap_W)

        # ---- caps τ (the K-th listed value bounds every unlisted one) and the check of an unlisted sampled token --
        check_p = caps_p and not p_y_listed and n_valid_p > 0
        check_q = caps_q and not q_y_listed and n_valid_q > 0
        need_caps = nP + nQ > 0
        tau_p, tau_p_hi, dtau_p = _cap(P_I[r], Xp, Lp, Ep, caps_p and (need_caps or check_p))
        tau_q, tau_q_hi, dtau_q = _cap(Q_I[r], Xq, Lq, Eq, caps_q and (need_caps or check_q))
        if check_p and a - ea > (math.log(tau_p_hi) if tau_p_hi > 0.0 else -math.inf) + AGREE_TOL:
            err |= ERR_SAMPLED_ABOVE_CAP
        if check_q and b - eb > (math.log(tau_q_hi) if tau_q_hi > 0.0 else -math.inf) + AGREE_TOL:
            err |= ERR_SAMPLED_ABOVE_CAP

        # ---- P or Q non-empty: cap terms ℓ_P, ℓ_Q and the exact capped W-minimum (with P = Q = ∅ the exact minimum
        # is |t_p − t_q| − 3(Δt_p + Δt_q) ≤ |p_W − q_W|⁻, so the closed form already holds) ------------------------
        if need_caps:
            tp, tq = max(1.0 - (pa + sBp) - aP, 0.0), max(1.0 - (qb + sBq) - bQ, 0.0)
            cp, cp_hi = min(tau_p, tp), min(tau_p_hi, tp_hi)
            cq, cq_hi = min(tau_q, tq), min(tau_q_hi, tq_hi)
            CP_hi = CP = CQ_hi = CQ = 0.0
            for k in range(Kp):
                if match[k] == NOT_LISTED:
                    CP_hi += min(_box_hi(Xp[k], Lp[k], Ep[k]), cq_hi)
                    CP += min(Xp[k], cq)
            for j in range(Kq):
                if Q_I[r, j] >= 0 and Q_I[r, j] != y and not q_in_p[j]:
                    CQ_hi += min(_box_hi(Xq[j], Lq[j], Eq[j]), cp_hi)
                    CQ += min(Xq[j], cp)
            lP = max(aP_lo - min(tq_hi, CP_hi), 0.0)
            lQ = max(bQ_lo - min(tp_hi, CQ_hi), 0.0)
            lo_closed = 0.5 * (d_B + max(gap_W, lP + lQ))
            wmin = _wmin_exact(aP, bQ, tp, tq, CP, CQ, min(tq, nP * cq), min(tp, nQ * cp))
            # f is 1-Lipschitz in a, b, t_p, t_q and 2-Lipschitz in C_P, C_Q and the box ends, so the true minimum is
            # ≥ wmin − slack with slack built from how far each parameter can move within its η-box.
            dtp, dtq = tp_hi - tp_lo, tq_hi - tq_lo
            dcp, dcq = max(dtau_p, dtp), max(dtau_q, dtq)
            daP, dbQ = aP_hi - aP_lo, bQ_hi - bQ_lo
            dCP, dCQ = daP + nP * dcq, dbQ + nQ * dcp
            dX, dZ = max(dtq, nP * dcq), max(dtp, nQ * dcp)
            slack = daP + dbQ + dtp + dtq + 2.0 * (dCP + dCQ + dX + dZ)
            lo = max(lo_closed, 0.5 * (d_B + max(wmin - slack, 0.0)))
        lo = min(max(lo, 0.0), hi)  # the min only ever lowers lo (widens), never narrows

        # ---- KL(p‖q) (docs/intervals.md#kl-bounds): coarsening lower bound over B ∪ {y} ∪ {W}, each cell minimised
        # over its box --------------------------------------------------------------------------------------------
        kl_coarse = _hmin_box(pa_lo, pa_hi, a, ea, qb_hi, _log_box_hi(qb_hi, b, eb)) + hB + _hmin(pW_lo, pW_hi, qW_hi)
        kl_lo = max(max(kl_coarse, 2.0 * lo * lo), 0.0)
        kl_hi = math.inf
        if pW_hi <= 0.0:  # no p-mass can sit where q is unknown: KL = Σ_{B∪{y}} p log(p/q) exactly, up to η
            kl_hi = _hmax(pa_lo, pa_hi, qb_lo)
            for k in range(Kp):
                m = match[k]
                if m >= 0:
                    kl_hi += _hmax(
                        _box_lo(Xp[k], Lp[k], Ep[k]), _box_hi(Xp[k], Lp[k], Ep[k]), _box_lo(Xq[m], Lq[m], Eq[m])
                    )

        if err:
            lo, hi, kl_lo, kl_hi = 0.0, 1.0, 0.0, math.inf
        lo_out[r], hi_out[r], err_out[r], kl_lo_out[r], kl_hi_out[r] = lo, hi, err, kl_lo, kl_hi
