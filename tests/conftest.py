"""Shared fixtures for the portal tests (the engine test folders have their own conftests)."""

from __future__ import annotations

import copy
import os

import kombu.pools
import pytest

# The fast tier (`scripts/test` runs it first; `pytest -m fast` alone): tests of the pure engines and the docs, which
# need no database, broker, worker or browser. Any test in these folders marked slow or using the database stays out.
FAST_FOLDERS = ("certify", "fcr", "fidelity", "routing", "verify", "training", "docs")


def pytest_collection_modifyitems(config, items):
    root = config.rootpath / "tests"
    for item in items:
        try:
            parts = item.path.relative_to(root).parts
        except ValueError:
            continue
        engine = (parts[0] in FAST_FOLDERS and len(parts) > 1) or parts[0] in (
            "test_architecture.py",
            "test_lazy_exports.py",
            "test_lint_habits.py",
            "test_xdist_groups.py",
        )
        if (
            engine
            and not item.get_closest_marker("slow")
            and not item.get_closest_marker("django_db")
            and "django_db_setup" not in getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.fast)


def pytest_configure(config):
    """Passwords hashed with MD5 in the test processes (Django's advice for test suites; issue #30): the default
    PBKDF2 (1,000,000 iterations) took 0.23 s of CPU per hash on the 2-core machine, paid by every test that creates
    a user (the ``owner`` fixture, every browser test's set-up and sign-in). Production settings are unchanged; the
    other hashers stay listed, so a stored PBKDF2 hash still verifies. The live servers of the browser tests are
    forked from the test process and inherit this (a server that did not would refuse the sign-in: no silent pass)."""
    if not config.pluginmanager.has_plugin("django"):
        return
    from django.conf import settings

    if settings.configured:
        md5 = "django.contrib.auth.hashers.MD5PasswordHasher"
        settings.PASSWORD_HASHERS = [md5, *(h for h in settings.PASSWORD_HASHERS if h != md5)]


def pytest_runtest_setup(item):
    """One torch intra-op thread in the test processes (issue #30). ``scripts/test`` runs two or three test processes
    on two cores, each with torch's default of one thread per core: the threads wait for each other on a busy
    machine, and the in-process engine tests (tests/contracts/test_kc_catch_rate.py: 0.85 s a seed with 2 threads,
    0.20 s with 1, on the 2-core machine with the load at 6) spent most of their time there. Only this process:
    sandboxed children, subprocesses and Celery pool processes keep their own settings (no environment variable is
    set). A test that needs more threads sets them itself."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _isolated_portal(request, settings, tmp_path):
    """Each portal test gets its own artifact store, an in-memory broker (no worker unless a test starts
    one) and, with Redis, a channel-layer prefix of its own so parallel test processes never cross-talk."""
    from django.test import TransactionTestCase

    is_django_testcase = request.cls is not None and issubclass(request.cls, TransactionTestCase)
    if settings is not None:  # engine test folders override `settings` (no Django there)
        settings.AUDIT_LOG_WITNESS_DIR = str(
            tmp_path / "witness"
        )  # the log's append-only witness: per test, like the store
    if is_django_testcase or (
        "django_db_setup" not in request.fixturenames and not request.node.get_closest_marker("django_db")
    ):
        yield  # Django TestCase classes (the browser tests) configure their own isolation at class level
        return
    from audit_portal.celery import app

    settings.ARTIFACT_ROOT = tmp_path / "artifacts"
    app.conf.broker_url = "memory://"
    app.conf.broker_transport_options = {}
    # Forget (not close) pools made for another broker by an earlier test: kombu would hand a closed pool on.
    app._pool = None
    app.amqp._producer_pool = None
    kombu.pools.reset()  # the producer registry is keyed by broker URL: a pool closed by a stopped worker lives on
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if settings.REDIS_URL:
        layer = copy.deepcopy(settings.CHANNEL_LAYERS["default"])
        layer["CONFIG"]["prefix"] = f"test-{os.environ.get('AUDIT_INSTANCE', '')}-{worker}"  # per checkout too
        settings.CHANNEL_LAYERS = {"default": layer}
    yield
