"""Theorem B and the full-q KL bounds (docs/intervals.md#trainer-distribution-known): the trainer's whole distribution
known, the engine's top-K only. Oracles: the true TV/KL of random pairs, an LP for the exact lower end, and brute
force over the unknown p-mass placements for the exact upper end on tiny vocabularies."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from certify_helpers import random_pair, topk_view
from test_interval_lp_crosscheck import lp_min_tv
from workers.certify.intervals import exact_tv_kl, tv_interval_fullq


def run(p, q, K, y, caps=True, exact_hi=True):
    ids, lps = topk_view(p, K)
    return tv_interval_fullq(
        torch.tensor([ids], dtype=torch.int64).reshape(1, K),
        torch.tensor([lps], dtype=torch.float64).reshape(1, K),
        torch.from_numpy(np.log(q)[None, :]),
        torch.tensor([y]),
        torch.tensor([math.log(p[y])], dtype=torch.float64),
        caps=caps,
        exact_hi=exact_hi,
    )


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(2, 30), caps=st.booleans())
def test_fullq_contains_truth(seed, N, caps):
    rng = np.random.default_rng(seed)
    p, q = random_pair(rng, N)
    y = int(rng.choice(N, p=p))
    K = int(rng.integers(0, N + 1))
    r = run(p, q, K, y, caps)
    tv, kl = exact_tv_kl(torch.tensor(np.log(p)), torch.tensor(np.log(q)))
    assert int(r["err"][0]) == 0
    assert float(r["lo"][0]) - 1e-12 <= float(tv) <= float(r["hi"][0]) + 1e-12
    assert float(r["kl_lo"][0]) - 1e-12 <= float(kl) <= float(r["kl_hi"][0]) + 1e-9
    cons = run(p, q, K, y, caps, exact_hi=False)
    assert float(r["hi"][0]) <= float(cons["hi"][0]) + 1e-12


@pytest.mark.parametrize("seed", range(25))
def test_fullq_ends_are_exact(seed):
    rng = np.random.default_rng(500 + seed)
    N = int(rng.integers(3, 7))
    p, q = random_pair(rng, N)
    y = int(rng.choice(N, p=p))
    K = int(rng.integers(0, N - 1))
    caps = bool(seed % 2)
    r = run(p, q, K, y, caps)
    ids, _ = topk_view(p, K)
    known = set(ids) | {y}
    cap = min(p[i] for i in ids) if (caps and ids) else None
    lo = lp_min_tv(N, {i: p[i] for i in known}, {j: q[j] for j in range(N)}, cap, None)
    assert float(r["lo"][0]) == pytest.approx(lo, abs=1e-8)
    # exact max: the unknown p-mass t_p over W = unlisted ids (each ≤ c); TV is convex in p, so the max is at a
    # vertex of {x ≥ 0, Σx = t_p, x ≤ c}: all coordinates at 0 or c except one — enumerate them.
    W = [j for j in range(N) if j not in known]
    t_p = 1 - sum(p[i] for i in known)
    c = min(cap, t_p) if cap is not None else t_p
    best = 0.0
    for order in itertools.permutations(W):
        x = {}
        rest = t_p
        for j in order:
            x[j] = min(c, rest)
            rest -= x[j]
        if rest > 1e-12:
            continue
        pp = np.array([p[i] if i in known else x[i] for i in range(N)])
        best = max(best, 0.5 * np.abs(pp - q).sum())
    if W:
        assert float(r["hi"][0]) == pytest.approx(best, abs=1e-9)
