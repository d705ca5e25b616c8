"""Error-robust widening (docs/intervals.md#error-robust-widening): robust intervals contain the naive ones, and
contain the true TV when every logged log-prob is off by at most η (explicit η, or real bf16 / fp16 rounding with the
declared precision)."""

import math

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certify_helpers import random_pair, topk_view
from workers.certify.estimators import sampled_estimates
from workers.certify.intervals import tv_interval_topk

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def one(pi, pl, qi, ql, y, a, b, **kw):
    T = lambda x, d=torch.float64: torch.tensor([x], dtype=d)
    return tv_interval_topk(
        T(pi, torch.int64).reshape(1, -1),
        T(pl).reshape(1, -1),
        T(qi, torch.int64).reshape(1, -1),
        T(ql).reshape(1, -1),
        T(y, torch.int64),
        T(a),
        T(b),
        **kw,
    )


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    N=st.integers(2, 30),
    prec=st.sampled_from(["fp32", "fp16", "bf16"]),
    caps=st.booleans(),
)
def test_robust_contains_naive(seed, N, prec, caps):
    rng = np.random.default_rng(seed)
    p, q = random_pair(rng, N)
    y = int(rng.choice(N, p=p))
    pi, pl = topk_view(p, int(rng.integers(0, N + 1)))
    qi, ql = topk_view(q, int(rng.integers(0, N + 1)))
    naive = one(pi, pl, qi, ql, y, math.log(p[y]), math.log(q[y]), caps=caps)
    rob = one(pi, pl, qi, ql, y, math.log(p[y]), math.log(q[y]), caps=caps, precision=prec)
    assert int(naive.err[0]) == 0 and int(rob.err[0]) == 0
    assert float(rob.lo[0]) <= float(naive.lo[0]) + 1e-15
    assert float(rob.hi[0]) >= float(naive.hi[0]) - 1e-15
    assert float(rob.kl_lo[0]) <= float(naive.kl_lo[0]) + 1e-15


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    N=st.integers(2, 30),
    eta=st.sampled_from([1e-6, 1e-3, 0.02, 0.1]),
    caps=st.booleans(),
)
def test_robust_interval_contains_truth_under_perturbation(seed, N, eta, caps):
    rng = np.random.default_rng(seed)
    p, q = random_pair(rng, N)
    y = int(rng.choice(N, p=p))
    pi, pl = topk_view(p, int(rng.integers(0, N + 1)))
    qi, ql = topk_view(q, int(rng.integers(0, N + 1)))
    noise = lambda: rng.uniform(-eta, eta)
    logged_p = {i: min(0.0, math.log(p[i]) + noise()) for i in set(pi) | {y}}
    logged_q = {i: min(0.0, math.log(q[i]) + noise()) for i in set(qi) | {y}}
    r = one(
        pi, [logged_p[i] for i in pi], qi, [logged_q[i] for i in qi], y, logged_p[y], logged_q[y], caps=caps, eta=eta
    )
    true_tv = 0.5 * np.abs(p - q).sum()
    true_kl = float(np.sum(p * (np.log(p) - np.log(q))))
    if int(r.err[0]) == 0:  # a perturbation can legitimately make the logged data look inconsistent
        assert float(r.lo[0]) - 1e-12 <= true_tv <= float(r.hi[0]) + 1e-12
        assert float(r.kl_lo[0]) <= true_kl + 1e-12
    else:
        assert float(r.lo[0]) == 0.0 and float(r.hi[0]) == 1.0


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(2, 20), dtype=st.sampled_from(["bf16", "fp16"]))
def test_real_storage_rounding_is_covered(seed, N, dtype):
    """Round the true log-probs to bf16 / fp16 (as a logger would) and declare that precision."""
    rng = np.random.default_rng(seed)
    p, q = random_pair(rng, N, conc=1.0)
    p = np.maximum(p, 1e-4)
    p /= p.sum()
    q = np.maximum(q, 1e-4)
    q /= q.sum()
    y = int(rng.choice(N, p=p))
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    rnd = lambda x: float(torch.tensor(x, dtype=torch.float64).to(tdt).to(torch.float64))
    pi, _ = topk_view(p, int(rng.integers(0, N + 1)))
    qi, _ = topk_view(q, int(rng.integers(0, N + 1)))
    r = one(
        pi,
        [rnd(math.log(p[i])) for i in pi],
        qi,
        [rnd(math.log(q[i])) for i in qi],
        y,
        rnd(math.log(p[y])),
        rnd(math.log(q[y])),
        caps=True,
        precision=dtype,
    )
    true_tv = 0.5 * np.abs(p - q).sum()
    assert int(r.err[0]) == 0
    assert float(r.lo[0]) - 1e-12 <= true_tv <= float(r.hi[0]) + 1e-12


@SETTINGS
@given(
    py=st.floats(1e-6, 1.0), qy=st.floats(1e-6, 1.0), eta=st.floats(0, 0.05), e1=st.floats(-1, 1), e2=st.floats(-1, 1)
)
def test_sampled_robust_bounds(py, qy, eta, e1, e2):
    a, b = math.log(py), math.log(qy)
    la, lb = min(0.0, a + e1 * eta), min(0.0, b + e2 * eta)  # logged values within η of the truth
    est = sampled_estimates(
        torch.tensor([la], dtype=torch.float64), torch.tensor([lb], dtype=torch.float64), eta_roll=eta, eta_train=eta
    )
    assert float(est["tv_lo"][0]) <= abs(py - qy) + 1e-12
    assert float(est["abslog_hi"][0]) >= abs(b - a) - 1e-12
    assert float(est["k2_hi"][0]) >= 0.5 * (b - a) ** 2 - 1e-12
