"""Fixtures for the contract-engine tests (helpers live in kc_helpers.py)."""

import pytest


@pytest.fixture
def settings():
    """Stand-in for pytest-django's ``settings``: the root conftest's autouse portal fixture requests it and the
    engine tests run with ``-p no:django``; it returns early for tests without a database, so None is enough."""
    return None


@pytest.fixture(scope="session")
def shipped():
    from workers.contracts import suite

    return {c.cls: c for c in suite()}
