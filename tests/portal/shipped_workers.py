"""The worker roles as they ship: ``scripts/worker general`` and ``scripts/worker kernels`` — the command
``scripts/up``, the compose file and the k8s manifests run (prefork pool on PostgreSQL, their queues, the kernels
role without a signing key) — started as real processes against this test's database, artifact store and a
Redis broker database of its own. A test that only ever used an in-process solo worker hid that the sandbox
failed under prefork; tests that exercise the kernels path use these instead."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

import kombu.pools
import pytest

ROOT = Path(__file__).resolve().parents[2]


def broker_url() -> str:
    """A Redis database per xdist worker (12, 13, ...), away from the ones scripts/up and scripts/test use."""
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").lstrip("gw") or 0)
    return f"redis://127.0.0.1:6379/{12 + index % 4}"


def _point_app_at(url: str) -> None:
    from audit_portal.celery import app

    app.conf.broker_url = url
    app.conf.broker_transport_options = {"visibility_timeout": 3600}
    if os.environ.get("AUDIT_INSTANCE"):  # the workers inherit it and prefix their broker keys (settings.py)
        app.conf.broker_transport_options["global_keyprefix"] = f"{os.environ['AUDIT_INSTANCE']}:"
    app._pool = None
    app.amqp._producer_pool = None
    kombu.pools.reset()


@contextlib.contextmanager
def shipped_workers(settings, tmp_path, roles=("general", "kernels")):
    """Start the given roles; yield; stop them and show their logs on failure."""
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        pytest.skip("the shipped worker roles share the test database only on PostgreSQL")
    import redis

    url = broker_url()
    redis.Redis.from_url(url).flushdb()  # no task left by an earlier run may reach these workers
    db = settings.DATABASES["default"]
    # one signing key for the test process and the workers, as web and workers share one (docs/verify.md): a key
    # the log did not introduce cannot sign, so a second key would fail whichever signs second
    settings.AUDIT_SIGNING_KEY, settings.AUDIT_SIGNING_KEY_FILE = "", ""
    settings.AUDIT_SIGNING_KEY_DIR = tmp_path / "keys"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "PYTEST_"))}
    env.update(
        {
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
            "CELERY_BROKER_URL": url,
            "ARTIFACT_ROOT": str(settings.ARTIFACT_ROOT),
            "AUDIT_VAR_DIR": str(tmp_path / "worker-var"),
            "AUDIT_SIGNING_KEY_DIR": str(tmp_path / "keys"),
            "AUDIT_LOG_WITNESS_DIR": str(settings.AUDIT_LOG_WITNESS_DIR),
            "DB_CONN_MAX_AGE": "0",
        }
    )
    _point_app_at(url)
    procs, logs = [], []
    try:
        for i, role in enumerate(roles):  # a role started twice (two worker processes) logs to a second file
            log = tmp_path / (f"{role}-worker.log" if role not in roles[:i] else f"{role}-{i}-worker.log")
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    ["scripts/worker", role, "-l", "info", "--logfile", str(log)],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        _wait_ready(logs, procs)
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                p.wait()
        _point_app_at("memory://")
        print("\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for log in logs if log.exists()))


def _wait_ready(logs, procs, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise AssertionError(f"a worker exited at start (code {dead[0].returncode})")
        if all(log.exists() and " ready." in log.read_text() for log in logs):
            return
        time.sleep(0.3)
    raise AssertionError("the workers did not report ready in time")


def wait_for(predicate, timeout=180.0):
    """The portal tests' polling helper, with room for a sandboxed contract run."""
    from .pipelines.test_celery_integration import wait_for as poll

    return poll(predicate, timeout)
