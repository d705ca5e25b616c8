"""Fixtures for the training-engine tests (run with ``-p no:django``)."""

import pytest


@pytest.fixture
def settings():
    """Stand-in for pytest-django's ``settings`` requested by the root conftest's autouse fixture; the engine tests
    use no database, so None is enough."""
    return None
