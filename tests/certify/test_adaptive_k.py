"""Adaptive K (docs/intervals.md#adaptive-k): envelopes are valid at every K and monotone; the tolerance and decision
rules stop at the first K a brute-force scan over prefixes finds."""

import math

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certify_helpers import random_pair, topk_view
from workers.certify.adaptive import INSUFFICIENT_K, WITHIN_TOL, adaptive_k, interval_envelopes
from workers.certify.intervals import tv_interval
from workers.certify.robust import IN, OUT, UNDETERMINED


def batch(rng, B, N, K):
    ids_p = torch.full((B, K), -1, dtype=torch.int64)
    lp_p = torch.zeros((B, K), dtype=torch.float64)
    ids_q, lp_q = ids_p.clone(), lp_p.clone()
    y = torch.zeros(B, dtype=torch.int64)
    a = torch.zeros(B, dtype=torch.float64)
    b = torch.zeros(B, dtype=torch.float64)
    truth, raw = [], []
    for i in range(B):
        p, q = random_pair(rng, N)
        yy = int(rng.choice(N, p=p))
        pi, pl = topk_view(p, K)
        qi, ql = topk_view(q, K)
        ids_p[i], lp_p[i] = torch.tensor(pi), torch.tensor(pl, dtype=torch.float64)
        ids_q[i], lp_q[i] = torch.tensor(qi), torch.tensor(ql, dtype=torch.float64)
        y[i], a[i], b[i] = yy, math.log(p[yy]), math.log(q[yy])
        truth.append(0.5 * np.abs(p - q).sum())
        raw.append((pi, pl, qi, ql, yy, math.log(p[yy]), math.log(q[yy])))
    return (ids_p, lp_p, ids_q, lp_q, y, a, b), truth, raw


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(3, 25))
def test_envelopes_monotone_and_valid(seed, N):
    rng = np.random.default_rng(seed)
    K = min(N, 8)
    args, truth, raw = batch(rng, 6, N, K)
    LO, HI, err = interval_envelopes(*args)
    assert LO.shape == (6, K + 1) and int(err.abs().sum()) == 0
    assert torch.all(LO[:, 1:] >= LO[:, :-1]) and torch.all(HI[:, 1:] <= HI[:, :-1])
    width = HI - LO
    assert torch.all(width[:, 1:] <= width[:, :-1] + 1e-15)
    for i, tv in enumerate(truth):
        assert torch.all(LO[i] <= tv + 1e-12) and torch.all(HI[i] >= tv - 1e-12)
        # brute force: envelope = running max/min over prefixes of the single-position interval
        pi, pl, qi, ql, y, la, lb = raw[i]
        lo_run, hi_run = 0.0, 1.0
        for k in range(K + 1):
            lo, hi = tv_interval(pi[:k], pl[:k], qi[:k], ql[:k], y, la, lb)
            lo_run, hi_run = max(lo_run, lo), min(hi_run, hi)
            assert abs(float(LO[i, k]) - lo_run) < 1e-12 and abs(float(HI[i, k]) - hi_run) < 1e-12


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    N=st.integers(3, 25),
    tol=st.sampled_from([0.01, 0.05, 0.2]),
    theta=st.sampled_from([0.05, 0.15, 0.3]),
)
def test_rules_stop_at_first_sufficient_K(seed, N, tol, theta):
    rng = np.random.default_rng(seed)
    K = min(N, 8)
    args, truth, _ = batch(rng, 6, N, K)
    LO, HI, _ = interval_envelopes(*args)
    Kt, lo, hi, st_t = adaptive_k(*args, tol=tol)
    Kd, lod, hid, st_d = adaptive_k(*args, threshold=theta)
    for i, tv in enumerate(truth):
        ok = [k for k in range(K + 1) if float(HI[i, k] - LO[i, k]) <= tol]
        if ok:
            assert int(Kt[i]) == ok[0] and int(st_t[i]) == WITHIN_TOL
        else:
            assert int(Kt[i]) == K and int(st_t[i]) == INSUFFICIENT_K
        dec = [k for k in range(K + 1) if float(HI[i, k]) <= theta or float(LO[i, k]) > theta]
        assert int(Kd[i]) == (dec[0] if dec else K)
        s = int(st_d[i])
        assert s in (IN, OUT, UNDETERMINED)
        if s == IN:
            assert tv <= theta + 1e-12
        if s == OUT:
            assert tv > theta - 1e-12
        assert float(lod[i]) <= tv + 1e-12 <= float(hid[i]) + 2e-12
