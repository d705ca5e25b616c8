"""scripts/up refuses a PORT another program listens on at once, before it installs or creates anything (no
database, no broker keys, no var/ folders left behind)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_taken_port_is_refused_before_anything_is_created(tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        var = tmp_path / "var"
        env = {**os.environ, "PORT": str(port), "AUDIT_VAR_DIR": str(var)}
        done = subprocess.run(["scripts/up"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"another program listens on 127.0.0.1:{port}; nothing was started" in done.stderr
    assert not var.exists()  # no log/run folders, no secret key: nothing was created
    assert "==>" not in done.stdout  # no install, database or broker step began
