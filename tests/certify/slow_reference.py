"""A slow, obvious, position-by-position version of ``tv_interval_topk`` (Theorem A, KL bounds and η-robust widening
of docs/intervals.md#tv-interval-from-top-k-lists), written with Python loops, dicts and ``math`` only, to check the
vectorised engine against (tests/certify/test_kernel_equivalence.py). No numpy, no torch.

One position: the engine list ``p_list`` and the trainer list ``q_list`` are ``[(id, logp), …]`` in logged order
(an id < 0 is padding), the sampled id ``y`` with its logged log-probs ``a`` (engine) and ``b`` (trainer).
"""

import math

from workers.certify.intervals import (
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
from workers.certify.robust import NORM_SLACK, UNIT_ROUNDOFF


def eta_of(x, precision, eta):
    """Error model (docs/intervals.md#error-robust-widening): explicit η, or u·|ℓ|/(1 − u) + ν for a declared precision (non-finite values: ν)."""
    if eta is not None:
        return float(eta)
    u = UNIT_ROUNDOFF[precision]
    if u == 0.0:
        return 0.0
    mag = abs(x) if math.isfinite(x) else 0.0
    return mag * u / (1.0 - u) + NORM_SLACK[precision]


def clean(x):
    """NaN → 0, −inf → −800, positive → 0 (such rows are data errors; the value only has to be harmless)."""
    if math.isnan(x):
        return 0.0
    if x == -math.inf:
        return -800.0
    return min(x, 0.0)


def box(lp, e):
    """[p e^{−η}, min(p e^{η}, 1)], polynomially widened for η ≤ 1 exactly as the engine documents."""
    p = math.exp(lp)
    if e <= 1.0:
        return p * (1.0 - e), min(p * (1.0 + e + e * e), 1.0)
    return math.exp(lp - e), min(math.exp(lp + e), 1.0)


def hmin(p_lo, p_hi, q_hi):
    """min of p·log(p/q) over p ∈ [p_lo, p_hi] at q = q_hi."""
    p = min(max(q_hi / math.e, p_lo), p_hi)
    if p <= 0:
        return 0.0
    return p * (math.log(max(p, 1e-300)) - math.log(max(q_hi, 1e-300)))


def hmax(p_lo, p_hi, q_lo):
    lq = math.log(max(q_lo, 1e-300))
    return max(p_lo * (math.log(max(p_lo, 1e-300)) - lq), p_hi * (math.log(max(p_hi, 1e-300)) - lq))


def list_flags(lst, etas, sorted_required):
    err = 0
    valid = [i >= 0 for i, _ in lst]
    for k in range(1, len(lst)):
        if valid[k] and not valid[k - 1]:
            err |= ERR_PADDING
        if sorted_required and valid[k] and valid[k - 1] and lst[k][1] > lst[k - 1][1] + etas[k] + etas[k - 1] + 1e-12:
            err |= ERR_UNSORTED
    ids = [i for i, _ in lst if i >= 0]
    if len(ids) != len(set(ids)):
        err |= ERR_DUPLICATE
    for i, v in lst:
        if i >= 0 and not math.isfinite(v):
            err |= ERR_NONFINITE
        if i >= 0 and v > POS_TOL:
            err |= ERR_POSITIVE
    return err


def wmin_exact(aP, bQ, tp, tq, CP, CQ, Xmax, Zmax):
    """min over the candidate set of g_P(X) + g_Q(Z) + |t_p − t_q + X − Z| (docs/intervals.md#top-k-caps, exact capped minimum)."""

    def clip(v, hi):
        return min(max(v, 0.0), hi)

    xs = [0.0, Xmax, min(CP, Xmax)]
    zs = [0.0, Zmax, min(CQ, Zmax)]
    cands = [(x, z) for x in xs for z in zs]
    cands += [(x, clip(x + tp - tq, Zmax)) for x in xs] + [(clip(z - tp + tq, Xmax), z) for z in zs]

    def f(x, z):
        return aP - x + 2 * max(x - CP, 0.0) + bQ - z + 2 * max(z - CQ, 0.0) + abs(tp - tq + x - z)

    return min(f(x, z) for x, z in cands)


def sampled_flags(a, b, y) -> int:
    """The error flags of the sampled token's own values: non-finite, positive log-probs, a negative id."""
    err = 0
    if not (math.isfinite(a) and math.isfinite(b)):
        err |= ERR_NONFINITE
    if a > POS_TOL or b > POS_TOL:
        err |= ERR_POSITIVE
    if y < 0:
        err |= ERR_BAD_ID
    return err


def slow_interval(p_list, q_list, y, a, b, caps=(True, True), precision="exact", eta=None):
    """``(lo, hi, err, kl_lo, kl_hi, pW_hi)`` at one position."""
    caps_p, caps_q = caps
    ep = [eta_of(v, precision, eta) for _, v in p_list]
    eq = [eta_of(v, precision, eta) for _, v in q_list]
    ea, eb = eta_of(a, precision, eta), eta_of(b, precision, eta)
    err = list_flags(p_list, ep, caps_p) | list_flags(q_list, eq, caps_q) | sampled_flags(a, b, y)
    a, b = clean(a), clean(b)
    P = {}  # engine entries: id → (logp, η); the sampled token's own entry is kept apart
    Q = {}
    p_y_entries, q_y_entries = [], []
    for (i, v), e in zip(p_list, ep):
        if i >= 0:
            (p_y_entries.append((clean(v), e)) if i == y else P.setdefault(i, (clean(v), e)))
    for (i, v), e in zip(q_list, eq):
        if i >= 0:
            (q_y_entries.append((clean(v), e)) if i == y else Q.setdefault(i, (clean(v), e)))
    for entries, s, es in ((p_y_entries, a, ea), (q_y_entries, b, eb)):
        if entries and max(abs(v - s) - e - es for v, e in entries) > AGREE_TOL:
            err |= ERR_SAMPLED_MISMATCH
    B = [i for i in P if i in Q]
    Ponly = [i for i in P if i not in Q]
    Qonly = [i for i in Q if i not in P]
    pb = {i: box(*P[i]) for i in P}
    qbx = {i: box(*Q[i]) for i in Q}
    pa_lo, pa_hi = box(a, ea)
    qb_lo, qb_hi = box(b, eb)
    pa, qb = math.exp(a), math.exp(b)

    hi = min(max(1.0 - (min(pa_lo, qb_lo) + sum(min(pb[i][0], qbx[i][0]) for i in B)), 0.0), 1.0)
    sBp_lo = pa_lo + sum(pb[i][0] for i in B)
    sBp_hi = pa_hi + sum(pb[i][1] for i in B)
    sBq_lo = qb_lo + sum(qbx[i][0] for i in B)
    sBq_hi = qb_hi + sum(qbx[i][1] for i in B)
    aP_lo, aP_hi = sum(pb[i][0] for i in Ponly), sum(pb[i][1] for i in Ponly)
    bQ_lo, bQ_hi = sum(qbx[i][0] for i in Qonly), sum(qbx[i][1] for i in Qonly)
    if sBp_lo + aP_lo > 1.0 + SUM_TOL or sBq_lo + bQ_lo > 1.0 + SUM_TOL:
        err |= ERR_MASS
    tp_hi, tq_hi = max(1.0 - sBp_lo - aP_lo, 0.0), max(1.0 - sBq_lo - bQ_lo, 0.0)
    tp_lo, tq_lo = max(1.0 - sBp_hi - aP_hi, 0.0), max(1.0 - sBq_hi - bQ_hi, 0.0)
    aP, bQ = sum(math.exp(P[i][0]) for i in Ponly), sum(math.exp(Q[i][0]) for i in Qonly)
    tp = max(1.0 - (pa + sum(math.exp(P[i][0]) for i in B)) - aP, 0.0)
    tq = max(1.0 - (qb + sum(math.exp(Q[i][0]) for i in B)) - bQ, 0.0)

    # caps: τ = the smallest listed value of a side (its sampled-token entry included)
    def cap(side_caps, entries, y_entries, t, t_hi, s, es, y_listed):
        vals = [(math.exp(v), box(v, e)) for v, e in list(entries.values()) + y_entries]
        if not side_caps or not vals:
            return t, t_hi, 0.0, 0
        tau = min(v for v, _ in vals)
        tau_hi = min(bx[1] for _, bx in vals)
        above = 0
        if not y_listed and s - es > (math.log(tau_hi) if tau_hi > 0 else -math.inf) + AGREE_TOL:
            above = ERR_SAMPLED_ABOVE_CAP
        return min(tau, t), min(tau_hi, t_hi), max(bx[1] - bx[0] for _, bx in vals), above

    cp, cp_hi, dtau_p, ab_p = cap(caps_p, P, p_y_entries, tp, tp_hi, a, ea, bool(p_y_entries))
    cq, cq_hi, dtau_q, ab_q = cap(caps_q, Q, q_y_entries, tq, tq_hi, b, eb, bool(q_y_entries))
    err |= ab_p | ab_q

    d_y = max(pa_lo - qb_hi, qb_lo - pa_hi, 0.0)
    d_B = d_y + sum(max(pb[i][0] - qbx[i][1], qbx[i][0] - pb[i][1], 0.0) for i in B)
    pW_lo, pW_hi = min(max(1.0 - sBp_hi, 0.0), 1.0), min(max(1.0 - sBp_lo, 0.0), 1.0)
    qW_lo, qW_hi = min(max(1.0 - sBq_hi, 0.0), 1.0), min(max(1.0 - sBq_lo, 0.0), 1.0)
    gap_W = max(pW_lo - qW_hi, qW_lo - pW_hi, 0.0)
    CP_hi = sum(min(pb[i][1], cq_hi) for i in Ponly)
    CQ_hi = sum(min(qbx[i][1], cp_hi) for i in Qonly)
    lP = max(aP_lo - min(tq_hi, CP_hi), 0.0)
    lQ = max(bQ_lo - min(tp_hi, CQ_hi), 0.0)
    lo_closed = 0.5 * (d_B + max(gap_W, lP + lQ))
    nP, nQ = len(Ponly), len(Qonly)
    CP = sum(min(math.exp(P[i][0]), cq) for i in Ponly)
    CQ = sum(min(math.exp(Q[i][0]), cp) for i in Qonly)
    wmin = wmin_exact(aP, bQ, tp, tq, CP, CQ, min(tq, nP * cq), min(tp, nQ * cp))
    dtp, dtq = tp_hi - tp_lo, tq_hi - tq_lo
    dcp, dcq = max(dtau_p, dtp), max(dtau_q, dtq)
    daP, dbQ = aP_hi - aP_lo, bQ_hi - bQ_lo
    slack = (
        daP + dbQ + dtp + dtq + 2.0 * ((daP + nP * dcq) + (dbQ + nQ * dcp) + max(dtq, nP * dcq) + max(dtp, nQ * dcp))
    )
    lo_exact = 0.5 * (d_B + max(wmin - slack, 0.0))
    lo = min(max(lo_closed, lo_exact, 0.0), hi)

    kl_coarse = (
        hmin(pa_lo, pa_hi, qb_hi) + sum(hmin(pb[i][0], pb[i][1], qbx[i][1]) for i in B) + hmin(pW_lo, pW_hi, qW_hi)
    )
    kl_lo = max(kl_coarse, 2.0 * lo * lo, 0.0)
    kl_hi = math.inf
    if pW_hi <= 0.0:
        kl_hi = hmax(pa_lo, pa_hi, qb_lo) + sum(hmax(pb[i][0], pb[i][1], qbx[i][0]) for i in B)
    if err:
        return 0.0, 1.0, err, 0.0, math.inf, pW_hi
    return lo, hi, err, kl_lo, kl_hi, pW_hi
