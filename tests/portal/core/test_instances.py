"""One instance, one namespace: scripts/services.sh derives a private database name and AUDIT_INSTANCE per checkout,
the settings prefix every broker and channel-layer key with it, and a worker handed a task for a job its database
does not know says so in its log (it was a silent 'skipped')."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit_portal.jobs.execution import run_job

ROOT = Path(__file__).resolve().parents[3]


def services(tmp_path, script: str, **env) -> subprocess.CompletedProcess:
    """Source scripts/services.sh in a checkout at ``tmp_path`` (a copy of the script and a link to the venv), with
    DATABASE_URL and REDIS_URL preset so nothing is created on the local servers."""
    (tmp_path / "scripts").mkdir(parents=True, exist_ok=True)
    (tmp_path / "scripts" / "services.sh").write_text((ROOT / "scripts" / "services.sh").read_text())
    if not (tmp_path / ".venv").exists():
        (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    base = {k: v for k, v in os.environ.items() if k != "AUDIT_INSTANCE"}
    return subprocess.run(
        ["bash", "-c", f"source scripts/services.sh; {script}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "DATABASE_URL": "postgres://x@127.0.0.1:1/x", "REDIS_URL": "redis://127.0.0.1:1/0", **env},
    )


def test_each_checkout_gets_its_own_instance_name(tmp_path):
    a = services(tmp_path / "Checkout-A", "use_local_services; echo $AUDIT_INSTANCE").stdout.strip()
    b = services(tmp_path / "other" / "Checkout-A", "use_local_services; echo $AUDIT_INSTANCE").stdout.strip()
    assert a != b and a.startswith("checkout_a_") and b.startswith("checkout_a_")
    assert all(c.isalnum() or c == "_" for c in a + b) and a == a.lower()
    again = services(tmp_path / "Checkout-A", "use_local_services; echo $AUDIT_INSTANCE").stdout.strip()
    assert again == a  # stable for one checkout
    chosen = services(tmp_path / "Checkout-A", "use_local_services; echo $AUDIT_INSTANCE", AUDIT_INSTANCE="mine_2")
    assert chosen.stdout.strip() == "mine_2"
    bad = services(tmp_path / "Checkout-A", "use_local_services || echo refused $?", AUDIT_INSTANCE="no-dashes")
    assert "refused 64" in bad.stdout and "lowercase letters" in bad.stderr


def _settings(**env) -> list[str]:
    code = (
        "import os; os.environ['DJANGO_SETTINGS_MODULE']='audit_portal.settings'; import django; django.setup();"
        "from django.conf import settings as s; print(s.CELERY_BROKER_TRANSPORT_OPTIONS.get('global_keyprefix'));"
        "print(s.CHANNEL_LAYERS['default'].get('CONFIG', {}).get('prefix'))"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("AUDIT_INSTANCE", "CELERY_BROKER_URL")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, env={**base, **env}
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_instance_prefixes_broker_and_channel_layer_keys():
    assert _settings(REDIS_URL="redis://127.0.0.1:6379/0", AUDIT_INSTANCE="co_1") == ["co_1:", "asgi-co_1"]
    assert _settings(REDIS_URL="redis://127.0.0.1:6379/0", AUDIT_INSTANCE="") == ["None", "asgi"]


@pytest.mark.django_db
def test_a_task_for_a_job_this_database_does_not_know_is_logged_as_an_error(caplog):
    called = []
    with caplog.at_level(logging.ERROR, logger="audit_portal.jobs.execution"):
        assert run_job(987654321, lambda job, progress: called.append(job)) == "unknown_job"
    assert not called
    [record] = [r for r in caplog.records if "987654321" in r.getMessage()]
    assert record.levelno == logging.ERROR and "another instance may share this broker" in record.getMessage()
