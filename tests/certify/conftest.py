"""Fixtures of the certificate-engine tests (helpers are in certify_helpers.py)."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def settings():
    """Stand-in for pytest-django's ``settings``: the root conftest's autouse portal fixture requests it, and the
    engine tests run with ``-p no:django``. It returns early for tests without a database, so None is enough."""
    return None
