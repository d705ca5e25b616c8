"""Fixtures for the routing-engine tests (no database)."""

import pytest


@pytest.fixture
def settings():
    """Stand-in for pytest-django's ``settings`` requested by the root conftest's autouse fixture."""
    return None
