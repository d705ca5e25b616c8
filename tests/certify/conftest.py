"""Shared helpers for the certificate-engine tests: random distribution pairs and the list views of them."""
import math

import numpy as np
import pytest
import torch


def topk_view(dist, K):
    """The top-K list (ids, log-probs) of a distribution, descending."""
    order = np.argsort(-dist, kind="stable")[:K]
    return [int(i) for i in order], [math.log(dist[i]) for i in order]


def random_pair(rng, N, conc=None, mix=None):
    """A random pair (p, q) over N tokens, strictly positive; q is a perturbation of p when ``mix`` is given."""
    conc = conc if conc is not None else rng.choice([0.1, 0.5, 1.0, 5.0])
    p = rng.dirichlet(np.full(N, conc)) + 1e-12
    p /= p.sum()
    r = rng.dirichlet(np.full(N, conc)) + 1e-12
    r /= r.sum()
    m = rng.uniform(0, 1) if mix is None else mix
    q = (1 - m) * p + m * r
    q /= q.sum()
    return p, q


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def f64(x):
    return torch.as_tensor(x, dtype=torch.float64)


@pytest.fixture
def settings():
    """Stand-in for pytest-django's ``settings``: the root conftest's autouse portal fixture requests it, and the
    engine tests run with ``-p no:django``. It returns early for tests without a database, so None is enough."""
    return None
