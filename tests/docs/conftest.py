"""The documentation tests read files only (run with ``-p no:django`` or under the suite's settings)."""

import pytest


@pytest.fixture
def settings():
    """Stand-in for pytest-django's ``settings`` requested by the root conftest's autouse fixture; these tests
    use no database, so None is enough."""
    return None
