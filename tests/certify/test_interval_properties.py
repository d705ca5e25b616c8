"""Hypothesis: the certified interval contains the true TV for random distribution pairs and random lists, lo ≤ hi,
and the batch path agrees with the single-position path (Theorem A,
docs/intervals.md#tv-interval-from-top-k-lists)."""

import math

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certify_helpers import random_pair, topk_view
from workers.certify.intervals import tv_interval, tv_interval_topk

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _instance(seed, N, topk):
    rng = np.random.default_rng(seed)
    p, q = random_pair(rng, N)
    y = int(rng.choice(N, p=p))
    Kp, Kq = int(rng.integers(0, N + 1)), int(rng.integers(0, N + 1))
    if topk:
        pi, pl = topk_view(p, Kp)
        qi, ql = topk_view(q, Kq)
    else:  # arbitrary subsets, arbitrary order is not allowed: keep them sorted descending
        pi = sorted(rng.choice(N, Kp, replace=False).tolist(), key=lambda i: -p[i])
        qi = sorted(rng.choice(N, Kq, replace=False).tolist(), key=lambda i: -q[i])
        pl, ql = [math.log(p[i]) for i in pi], [math.log(q[i]) for i in qi]
    return p, q, y, pi, pl, qi, ql


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(2, 40), topk=st.booleans())
def test_interval_contains_true_tv(seed, N, topk):
    p, q, y, pi, pl, qi, ql = _instance(seed, N, topk)
    true_tv = 0.5 * np.abs(p - q).sum()
    lo, hi = tv_interval(pi, pl, qi, ql, y, math.log(p[y]), math.log(q[y]), topk_caps=topk)
    assert 0.0 <= lo <= hi <= 1.0
    assert lo - 1e-12 <= true_tv <= hi + 1e-12
    # width ≤ min(p_W, q_W) (Theorem A)
    B = {y} | (set(pi) & set(qi))
    assert hi - lo <= min(1 - sum(p[i] for i in B), 1 - sum(q[i] for i in B)) + 1e-12


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(2, 25))
def test_caps_never_loosen(seed, N):
    """With genuine top-K lists the capped interval is inside the cap-free one."""
    p, q, y, pi, pl, qi, ql = _instance(seed, N, True)
    lo_c, hi_c = tv_interval(pi, pl, qi, ql, y, math.log(p[y]), math.log(q[y]), topk_caps=True)
    lo_n, hi_n = tv_interval(pi, pl, qi, ql, y, math.log(p[y]), math.log(q[y]), topk_caps=False)
    assert lo_c >= lo_n - 1e-12 and hi_c <= hi_n + 1e-12


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_batch_matches_single_positions(seed):
    rng = np.random.default_rng(seed)
    B, T, K, N = 3, 5, 6, 12
    P_ids = torch.full((B, T, K), -1, dtype=torch.int64)
    P_lp = torch.zeros((B, T, K), dtype=torch.float64)
    Q_ids, Q_lp = P_ids.clone(), P_lp.clone()
    Y = torch.zeros((B, T), dtype=torch.int64)
    A = torch.zeros((B, T), dtype=torch.float64)
    Bq = torch.zeros((B, T), dtype=torch.float64)
    singles = {}
    for b in range(B):
        for t in range(T):
            p, q = random_pair(rng, N)
            y = int(rng.choice(N, p=p))
            kp, kq = int(rng.integers(0, K + 1)), int(rng.integers(0, K + 1))
            pi, pl = topk_view(p, kp)
            qi, ql = topk_view(q, kq)
            P_ids[b, t, :kp], P_lp[b, t, :kp] = torch.tensor(pi), torch.tensor(pl, dtype=torch.float64)
            Q_ids[b, t, :kq], Q_lp[b, t, :kq] = torch.tensor(qi), torch.tensor(ql, dtype=torch.float64)
            Y[b, t], A[b, t], Bq[b, t] = y, math.log(p[y]), math.log(q[y])
            singles[b, t] = tv_interval(pi, pl, qi, ql, y, math.log(p[y]), math.log(q[y]))
    r = tv_interval_topk(P_ids, P_lp, Q_ids, Q_lp, Y, A, Bq)
    assert r.lo.shape == (B, T)
    for (b, t), (lo, hi) in singles.items():
        assert abs(float(r.lo[b, t]) - lo) <= 1e-12 and abs(float(r.hi[b, t]) - hi) <= 1e-12
    assert int(r.err.abs().sum()) == 0
