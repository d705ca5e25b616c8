"""Adaptive K (docs/intervals.md#adaptive-k): intervals for every list prefix K = 0..K_max and their running envelopes.

lo(K), hi(K) use the first K entries of each side's list plus the sampled token (Theorem A with caps: a prefix of a
top-K list is a top-K' list). Every lo(K) and hi(K) is a valid bound, hence so are the envelopes
LO(K) = max_{K'≤K} lo(K'), HI(K) = min_{K'≤K} hi(K'); the envelope width is non-increasing in K.
One vectorised interval evaluation per K (a Python loop over K ≤ 21, never over tokens).
"""

from __future__ import annotations

import torch

from workers.certify.intervals import tv_interval_topk
from workers.certify.robust import DATA_ERROR, IN, OUT, UNDETERMINED

INSUFFICIENT_K = 4  # tolerance rule: no K reached the width tolerance
WITHIN_TOL = 5  # tolerance rule: width ≤ tol reached at the returned K
ADAPTIVE_STATUS_NAMES = {
    IN: "IN",
    OUT: "OUT",
    UNDETERMINED: "UNDETERMINED",
    DATA_ERROR: "DATA_ERROR",
    INSUFFICIENT_K: "INSUFFICIENT_K",
    WITHIN_TOL: "WITHIN_TOL",
}


def interval_envelopes(
    p_ids,
    p_lp,
    q_ids,
    q_lp,
    sampled_id,
    logp_roll_y,
    logp_train_y,
    *,
    K_max=None,
    caps: bool = True,
    precision="exact",
    eta=None,
):
    """``(LO, HI, err)``: envelopes of shape ``[..., K_max+1]`` (index K = number of list entries used) and the
    int32 data-error flags (OR over all prefixes, so a bad list fails closed at every K)."""
    p_ids, q_ids = torch.as_tensor(p_ids), torch.as_tensor(q_ids)
    p_lp = torch.as_tensor(p_lp, dtype=torch.float64)
    q_lp = torch.as_tensor(q_lp, dtype=torch.float64)
    K_all = max(p_ids.shape[-1], q_ids.shape[-1])
    K_max = K_all if K_max is None else min(int(K_max), K_all)
    los, his = [], []
    err = None
    for K in range(K_max + 1):
        r = tv_interval_topk(
            p_ids[..., :K],
            p_lp[..., :K],
            q_ids[..., :K],
            q_lp[..., :K],
            sampled_id,
            logp_roll_y,
            logp_train_y,
            caps=caps,
            precision=precision,
            eta=eta,
        )
        los.append(r.lo)
        his.append(r.hi)
        err = r.err if err is None else err | r.err
    LO = torch.cummax(torch.stack(los, -1), -1).values
    HI = torch.cummin(torch.stack(his, -1), -1).values
    bad = (err != 0)[..., None]
    LO = torch.where(bad, torch.zeros_like(LO), LO)
    HI = torch.where(bad, torch.ones_like(HI), HI)
    return LO, HI, err


def adaptive_k(
    p_ids,
    p_lp,
    q_ids,
    q_lp,
    sampled_id,
    logp_roll_y,
    logp_train_y,
    *,
    tol=None,
    threshold=None,
    K_max=None,
    caps: bool = True,
    precision="exact",
    eta=None,
):
    """Adaptive-K rule (docs/intervals.md#adaptive-k). Returns ``(K, lo, hi, status)`` per position.

    * Decision rule (``threshold`` θ given): the first K with HI(K) ≤ θ (status IN) or LO(K) > θ (OUT);
      otherwise UNDETERMINED with the K_max envelope.
    * Tolerance rule (``tol`` given, no threshold): the smallest K with HI(K) − LO(K) ≤ tol (WITHIN_TOL);
      otherwise INSUFFICIENT_K with [LO(K_max), HI(K_max)].
    Data errors give status DATA_ERROR with [0, 1] (fail closed).
    """
    LO, HI, err = interval_envelopes(
        p_ids,
        p_lp,
        q_ids,
        q_lp,
        sampled_id,
        logp_roll_y,
        logp_train_y,
        K_max=K_max,
        caps=caps,
        precision=precision,
        eta=eta,
    )
    Kmax = LO.shape[-1] - 1
    if threshold is not None:
        done = (HI <= threshold) | (LO > threshold)
    elif tol is not None:
        done = (HI - LO) <= tol
    else:
        done = torch.zeros_like(LO, dtype=torch.bool)
    any_done = done.any(-1)
    K = torch.where(any_done, done.to(torch.uint8).argmax(-1), torch.full_like(any_done, Kmax, dtype=torch.int64))
    lo = LO.gather(-1, K[..., None])[..., 0]
    hi = HI.gather(-1, K[..., None])[..., 0]
    if threshold is not None:
        status = torch.full(lo.shape, UNDETERMINED, dtype=torch.int8)
        status[hi <= threshold] = IN
        status[lo > threshold] = OUT
    else:
        status = torch.where(
            any_done, torch.tensor(WITHIN_TOL, dtype=torch.int8), torch.tensor(INSUFFICIENT_K, dtype=torch.int8)
        )
    status[err != 0] = DATA_ERROR
    return K, lo, hi, status
