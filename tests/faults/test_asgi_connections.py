"""The web process (ASGI) connects per request; workers and commands keep persistent connections."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = "from django.conf import settings; print(settings.DATABASES['default']['CONN_MAX_AGE'])"


def conn_max_age(entry: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "DB_CONN_MAX_AGE"}
    out = subprocess.run(
        [sys.executable, "-c", f"{entry}; {PROBE}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().splitlines()[-1])


def test_asgi_web_process_does_not_keep_connections_per_thread():
    assert conn_max_age("import audit_portal.asgi") == 0


def test_workers_and_commands_keep_persistent_connections():
    assert (
        conn_max_age(
            "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'audit_portal.settings');"
            " django.setup()"
        )
        == 60
    )
