"""The lower end against an LP over all completions consistent with the lists (scipy.optimize.linprog).

Without caps and with |R| ≥ 2 the lower end is the exact minimum (docs/intervals.md#tv-interval-from-top-k-lists); with caps the exact capped
minimum assumes a large R, so we give the LP a vocabulary with many unlisted ids and ask for equality too.
The lower end must never exceed the LP minimum (validity), on any vocabulary size."""

import math

import numpy as np
import pytest
from scipy.optimize import linprog

from certify_helpers import random_pair, topk_view
from workers.certify.intervals import tv_interval


def lp_min_tv(N, known_p, known_q, cap_p=None, cap_q=None):
    """min ½Σ|p_v − q_v| over distributions on N ids with the given known values and optional caps on the rest."""
    # variables: p (N), q (N), u (N) with u ≥ |p − q|
    n = 3 * N
    c = np.concatenate([np.zeros(2 * N), 0.5 * np.ones(N)])
    A_ub, b_ub = [], []
    for v in range(N):
        row = np.zeros(n)
        row[v], row[N + v], row[2 * N + v] = 1, -1, -1
        A_ub.append(row)
        b_ub.append(0)
        row = np.zeros(n)
        row[v], row[N + v], row[2 * N + v] = -1, 1, -1
        A_ub.append(row)
        b_ub.append(0)
    A_eq = [np.concatenate([np.ones(N), np.zeros(2 * N)]), np.concatenate([np.zeros(N), np.ones(N), np.zeros(N)])]
    b_eq = [1.0, 1.0]
    bounds = []
    for v in range(N):
        bounds.append((known_p[v], known_p[v]) if v in known_p else (0, cap_p))
    for v in range(N):
        bounds.append((known_q[v], known_q[v]) if v in known_q else (0, cap_q))
    bounds += [(0, None)] * N
    res = linprog(
        c,
        A_ub=np.array(A_ub),
        b_ub=b_ub,
        A_eq=np.array(A_eq),
        b_eq=b_eq,
        bounds=bounds,
        method="highs",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    assert res.status == 0, res.message
    return res.fun


@pytest.mark.parametrize("seed", range(60))
def test_lower_end_equals_lp_minimum(seed):
    rng = np.random.default_rng(1000 + seed)
    N = int(rng.integers(3, 9))
    p, q = random_pair(rng, N)
    y = int(rng.choice(N, p=p))
    caps = bool(seed % 2)
    Kp, Kq = int(rng.integers(0, N)), int(rng.integers(0, N))
    pi, pl = topk_view(p, Kp)
    qi, ql = topk_view(q, Kq)
    lo, hi = tv_interval(pi, pl, qi, ql, y, math.log(p[y]), math.log(q[y]), topk_caps=caps)
    known_p = {i: p[i] for i in pi} | {y: p[y]}
    known_q = {i: q[i] for i in qi} | {y: q[y]}
    cap_p = min(p[i] for i in pi) if (caps and pi) else None
    cap_q = min(q[i] for i in qi) if (caps and qi) else None
    # (1) validity on the real vocabulary size
    assert lo <= lp_min_tv(N, known_p, known_q, cap_p, cap_q) + 1e-9
    # (2) tightness on a large vocabulary (the listed data are identical; 60 extra unlisted ids)
    big = N + 60
    m = lp_min_tv(big, known_p, known_q, cap_p, cap_q)
    assert lo == pytest.approx(m, abs=1e-8)
    assert hi >= lo
