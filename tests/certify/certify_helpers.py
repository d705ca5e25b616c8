"""Random distribution pairs and their top-K list views, shared by the certificate-engine tests (a module of its
own, not conftest: several test folders have a conftest.py, and ``from conftest import`` finds whichever pytest
loaded last when folders are run together)."""

import math

import numpy as np


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
