"""With nothing but Python (no DATABASE_URL, no REDIS_URL) the portal runs on embedded defaults: SQLite,
the filesystem broker and the in-memory channel layer — and a real worker process still processes uploads."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


def run(args, env, timeout=180, check=True):
    out = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_embedded_portal_processes_an_upload_end_to_end(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
    }
    env["AUDIT_VAR_DIR"] = str(tmp_path)
    probe = run(
        [
            "-c",
            "import os; os.environ['DJANGO_SETTINGS_MODULE']='audit_portal.settings'; import django; django.setup();"
            "from django.conf import settings as s; print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL,"
            " s.CHANNEL_LAYERS['default']['BACKEND'], s.PROGRESS_POLL_SECONDS)",
        ],
        env,
    )
    engine, broker, layer, poll = probe.stdout.split()
    assert engine.endswith("sqlite3") and broker == "filesystem://" and layer.endswith("InMemoryChannelLayer")
    assert float(poll) > 0
    run(["manage.py", "migrate", "--noinput", "-v0"], env)
    run(["manage.py", "seed_demo", "--trajectories", "6"], env)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "audit_portal",
            "worker",
            "-Q",
            "cpu,gpu",
            "-P",
            "solo",
            "-l",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        waited = run(
            ["manage.py", "wait_for_jobs", "--project", "demo", "--timeout", "150"], env, timeout=170, check=False
        )
    finally:
        worker.terminate()
        log = worker.communicate(timeout=30)[0].decode(errors="replace")
    assert waited.returncode == 0, waited.stdout + waited.stderr + log[-3000:]
    check = run(
        [
            "manage.py",
            "shell",
            "-c",
            "from audit_portal.runs.models import Upload; from audit_portal.jobs.models import Job;"
            "u = Upload.objects.get(); print(u.stage, u.run.name, sorted({j.state for j in Job.objects.all()}),"
            " Job.objects.count())",
        ],
        env,
    )
    stage, run_name, states, *_ = check.stdout.strip().splitlines()[-1].split(" ", 2) + [""]
    assert stage == "valid" and run_name == "demo-run", check.stdout
    assert "failed" not in check.stdout and "succeeded" in check.stdout
