"""The compiled engine equals the slow, obvious position-by-position version (slow_reference.py) within 1e-12, on
hypothesis-generated batches: true top-K lists and arbitrary subsets, trainer lists that cover the rollout's ids
(fcr/1), K = 0 on either side, padding with junk values, caps per side, every declared precision and explicit η
(including η > 1), and injected bad data (the flags must agree). Also the sampled-only certificate against its
two-line definition."""

import math

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certify_helpers import random_pair
from slow_reference import slow_interval
from workers.certify.estimators import sampled_certificate
from workers.certify.intervals import ERR_DUPLICATE, tv_interval_topk

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_row(rng, V, kind_p, kind_q, Kp, Kq, corrupt):
    p, q = random_pair(rng, V, mix=float(rng.uniform(0, 0.6)))
    y = int(rng.choice(V, p=p))
    order_p, order_q = np.argsort(-p, kind="stable"), np.argsort(-q, kind="stable")
    kp, kq = int(rng.integers(0, min(Kp, V) + 1)), int(rng.integers(0, min(Kq, V) + 1))
    p_ids = list(order_p[:kp]) if kind_p == "topk" else list(rng.permutation(V)[:kp])
    if kind_q == "topk":
        q_ids = list(order_q[:kq])
    elif kind_q == "covers":  # fcr/1: the trainer's values on the rollout's ids, possibly more, any order
        extra = [i for i in rng.permutation(V) if i not in p_ids][: max(0, kq - len(p_ids))]
        q_ids = list(rng.permutation(p_ids + extra))[: max(kq, len(p_ids))] if (p_ids or extra) else []
    else:
        q_ids = list(rng.permutation(V)[:kq])
    p_list = [(int(i), math.log(p[i])) for i in p_ids]
    q_list = [(int(i), math.log(q[i])) for i in q_ids]
    a, b = math.log(p[y]), math.log(q[y])
    if corrupt == 1 and p_list:
        p_list[0] = (p_list[0][0], float("nan"))
    elif corrupt == 2 and len(q_list) > 1:
        q_list[1] = (q_list[0][0], q_list[1][1])  # duplicate id
    elif corrupt == 3:
        a = a + 0.5  # disagrees with its list entry (if listed)
    elif corrupt == 4 and len(p_list) > 1:
        p_list[0], p_list[1] = p_list[1], p_list[0]  # unsorted
    elif corrupt == 5:
        b = 0.25  # positive log-prob
    elif corrupt == 6:
        y = -2
    return p_list, q_list, y, a, b


def to_tensors(rows):
    Kp = max([len(r[0]) for r in rows] + [0])
    Kq = max([len(r[1]) for r in rows] + [0])
    n = len(rows)
    P_I, P_L = np.full((n, Kp), -1, np.int64), np.zeros((n, Kp))
    Q_I, Q_L = np.full((n, Kq), -1, np.int64), np.zeros((n, Kq))
    junk = [0.0, -np.inf, 3.0, np.nan]
    for r, (pl, ql, _y, _a, _b) in enumerate(rows):
        for k, (i, v) in enumerate(pl):
            P_I[r, k], P_L[r, k] = i, v
        for k, (i, v) in enumerate(ql):
            Q_I[r, k], Q_L[r, k] = i, v
        P_L[r, len(pl) :] = junk[r % 4]
        Q_L[r, len(ql) :] = junk[(r + 1) % 4]
    Y = np.array([r[2] for r in rows], np.int64)
    A = np.array([r[3] for r in rows])
    B = np.array([r[4] for r in rows])
    return [torch.from_numpy(x) for x in (P_I, P_L, Q_I, Q_L, Y, A, B)]


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    V=st.integers(2, 12),
    kinds=st.tuples(st.sampled_from(["topk", "subset"]), st.sampled_from(["topk", "subset", "covers"])),
    K=st.tuples(st.integers(0, 8), st.integers(0, 10)),
    caps=st.tuples(st.booleans(), st.booleans()),
    prec=st.sampled_from(["exact", "fp32", "bf16", "fp16", 1e-6, 1e-3, 0.05, 1.5]),
    bad=st.floats(0, 0.3),
)
def test_engine_equals_slow_reference(seed, n, V, kinds, K, caps, prec, bad):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        corrupt = int(rng.integers(1, 7)) if rng.uniform() < bad else 0
        rows.append(make_row(rng, V, kinds[0], kinds[1], K[0], K[1], corrupt))
    precision, eta = (prec, None) if isinstance(prec, str) else ("exact", prec)
    r = tv_interval_topk(*to_tensors(rows), caps=caps, precision=precision, eta=eta)
    for i, (pl, ql, y, a, b) in enumerate(rows):
        lo, hi, err, kl_lo, kl_hi, pW_hi = slow_interval(pl, ql, y, a, b, caps=caps, precision=precision, eta=eta)
        got_err = int(r.err[i])
        if err & ERR_DUPLICATE:  # other flags are computed over repeated entries and may differ; fail closed
            assert got_err & ERR_DUPLICATE and float(r.lo[i]) == 0.0 and float(r.hi[i]) == 1.0
            continue
        assert got_err == err, (i, got_err, err, pl, ql, y, a, b)
        assert abs(float(r.lo[i]) - lo) <= 1e-12, (i, float(r.lo[i]), lo)
        assert abs(float(r.hi[i]) - hi) <= 1e-12, (i, float(r.hi[i]), hi)
        assert abs(float(r.kl_lo[i]) - kl_lo) <= 1e-12 * max(1.0, kl_lo), (i, float(r.kl_lo[i]), kl_lo)
        got_hi = float(r.kl_hi[i])
        if math.isinf(got_hi) != math.isinf(kl_hi):
            # finite only when p_W⁺ = 0: a sum that lands on 1 within rounding may go either way
            assert abs(pW_hi) <= 1e-12, (i, got_hi, kl_hi, pW_hi)
        elif math.isfinite(kl_hi):
            assert abs(got_hi - kl_hi) <= 1e-12 * max(1.0, abs(kl_hi))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 70_000))
def test_sampled_certificate_equals_definition(seed, n):
    rng = np.random.default_rng(seed)
    a = np.log(rng.uniform(1e-6, 1.0, n))
    b = np.minimum(a + rng.normal(0, rng.choice([1e-3, 0.1, 2.0]), n), 0.0)
    lo, hi = sampled_certificate(torch.from_numpy(a), torch.from_numpy(b))
    assert lo.shape == hi.shape == (n,) and lo.dtype == hi.dtype == torch.float64
    idx = rng.integers(0, max(n, 1), size=min(n, 300))
    for i in idx:
        p, q = math.exp(a[i]), math.exp(b[i])
        assert abs(float(lo[i]) - abs(p - q)) <= 1e-15
        assert abs(float(hi[i]) - (1.0 - min(p, q))) <= 1e-15
    if n:  # and the whole arrays against the plain torch expression
        p, q = torch.exp(torch.from_numpy(a)), torch.exp(torch.from_numpy(b))
        assert torch.allclose(lo, (p - q).abs(), rtol=0, atol=1e-15)
        assert torch.allclose(hi, 1.0 - torch.minimum(p, q), rtol=0, atol=1e-15)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    K=st.sampled_from([21, 22, 30]),
    big=st.booleans(),
    prec=st.sampled_from(["exact", "fp32", "bf16"]),
)
def test_long_lists_and_64_bit_ids(seed, K, big, prec):
    """Lists longer than the usual top-20 and ids beyond 32 bits (vocabulary ids are int64 end to end)."""
    rng = np.random.default_rng(seed)
    rows = [make_row(rng, 40, "topk", str(rng.choice(["topk", "covers", "subset"])), K, K, 0) for _ in range(24)]
    off = 2**40 if big else 0
    rows = [([(i + off, v) for i, v in pl], [(i + off, v) for i, v in ql], y + off, a, b) for pl, ql, y, a, b in rows]
    caps = (True, bool(rng.integers(2)))
    r = tv_interval_topk(*to_tensors(rows), caps=caps, precision=prec)
    for i, (pl, ql, y, a, b) in enumerate(rows):
        lo, hi, err, kl_lo, _kl_hi, _ = slow_interval(pl, ql, y, a, b, caps=caps, precision=prec)
        assert int(r.err[i]) == err
        assert abs(float(r.lo[i]) - lo) <= 1e-12 and abs(float(r.hi[i]) - hi) <= 1e-12
        assert abs(float(r.kl_lo[i]) - kl_lo) <= 1e-12 * max(1.0, kl_lo)
