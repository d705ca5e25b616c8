"""scripts/bootstrap (run by scripts/up) shows a cold install's progress as pip goes — one line per package as pip
reaches it, not minutes of silence — keeps pip's full output in .venv/pip-install.log, and on a failure says so with
the log's last lines. Run in a copy of the script beside a stand-in interpreter whose "pip" prints what pip prints
and, for the streaming check, waits for the test before it goes on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_PYTHON = """#!/usr/bin/env bash
# "python -m pip install -q --upgrade pip": nothing to say
case " $* " in *" --upgrade "*) exit 0 ;; esac
echo "Collecting alpha==1.0"
echo "  Downloading alpha-1.0.tar.gz"
# the test reads the first progress line while this "pip" is still running, then lets it go on
for _ in $(seq 300); do [ -e "$GO" ] && break; sleep 0.1; done
echo "Collecting beta==2.0"
echo "Installing collected packages: alpha, beta"
if [ -n "$FAIL" ]; then echo "ERROR: beta needs a compiler"; exit 1; fi
echo "Successfully installed alpha-1.0 beta-2.0"
"""


def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap", root / "scripts" / "bootstrap")
    (root / "requirements.txt").write_text("# pinned\nalpha==1.0\n\nbeta==2.0\n--extra-index-url https://x\n")
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return root


def test_each_package_is_shown_as_pip_reaches_it_and_the_full_log_is_kept(tmp_path):
    root = checkout(tmp_path)
    go = tmp_path / "go"
    proc = subprocess.Popen(
        ["scripts/bootstrap"], cwd=root, env={"PATH": "/usr/bin:/bin", "GO": str(go)}, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().startswith("==> installing requirements")
        assert proc.stdout.readline() == "    [1] alpha==1.0\n"  # shown while pip is still working
        assert proc.poll() is None
        go.touch()
        rest = proc.stdout.read()
    finally:
        go.touch()
        proc.wait(timeout=60)
    assert proc.returncode == 0
    assert rest.splitlines() == [
        "    [2] beta==2.0",
        "    installing (unpacking every package; torch takes longest)",
        "    done",
    ]
    assert "Downloading alpha-1.0.tar.gz" in (root / ".venv" / "pip-install.log").read_text()
    assert (root / ".venv" / ".requirements.sha256").exists()  # a second run installs nothing
    again = subprocess.run(["scripts/bootstrap"], cwd=root, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == ""


def test_a_failed_install_says_so_with_the_logs_last_lines(tmp_path):
    root = checkout(tmp_path)
    (tmp_path / "go").touch()
    env = {"PATH": "/usr/bin:/bin", "GO": str(tmp_path / "go"), "FAIL": "1"}
    done = subprocess.run(["scripts/bootstrap"], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "pip could not install the requirements" in done.stderr and "ERROR: beta needs a compiler" in done.stderr
    assert not (root / ".venv" / ".requirements.sha256").exists()  # the next run tries again
