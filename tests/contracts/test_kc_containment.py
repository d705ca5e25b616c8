"""A submitted kernel is contained by the operating system, not by convention: from inside the sandbox it cannot
read the host's files or the worker's environment, see or signal other processes, reach any network (loopback
included), write outside its tmpfs, run as root, leave a process behind, or find the harness — and every such
attempt still ends in a verdict. The same holds through the command line and from a billiard (Celery prefork)
pool process, which is where the shipped worker starts it."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kc_helpers import REF, processes_with
from workers.contracts import run_contract
from workers.contracts.sandbox import SessionPool

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = Path(__file__).with_name("kc_attacks.py")
CANARY = "canary-7f3a9c-do-not-leak"


@pytest.fixture
def attack_module(tmp_path, monkeypatch):
    """The attack kernel, with the host's canaries written into its header."""
    secret = tmp_path / "signing-key.pem"
    secret.write_text(f"-----BEGIN PRIVATE KEY----- {CANARY}\n")
    secret.chmod(0o644)  # readable by anyone who can see it: only the mount namespace hides it
    tmp_path.chmod(0o777)  # writable by anyone who can see it: only the mount namespace protects it
    monkeypatch.setenv("DATABASE_URL", f"postgres://owner:{CANARY}@127.0.0.1/portal")
    monkeypatch.setenv("AUDIT_SECRET_KEY", CANARY)
    monkeypatch.setenv("KC_HIDDEN_SEED_KEY", CANARY)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    header = (f"CANARY_FILES = {[str(secret), str(ROOT / 'README.md'), '/etc/shadow']!r}\n"
              f"CANARY_TEXT = {CANARY!r}\nHOST_PORT = {listener.getsockname()[1]}\nTEST_PID = {os.getpid()}\n"
              f"WRITE_TARGET = {str(tmp_path / 'pwned')!r}\n")
    source = ATTACKS.read_text().replace('CANARY_FILES: list = []\nCANARY_TEXT = ""\nHOST_PORT = 0\nTEST_PID = 0\n'
                                         'WRITE_TARGET = ""\n', header)
    assert header in source
    path = tmp_path / "fast_kernels.py"
    path.write_text(source)
    yield path
    listener.close()


def _attacks_that_worked(reason: str) -> list[str]:
    assert "ATTACKS " in reason, reason
    listed = reason.split("ATTACKS ", 1)[1].split(" END", 1)[0]
    return [a for a in listed.split(",") if a]


def _no_daemon_survives():
    for _ in range(50):
        if not processes_with("kc-attack-daemon"):
            return True
        time.sleep(0.1)
    return False


def test_every_attack_fails_and_the_run_ends_in_a_verdict(attack_module, tmp_path):
    v = run_contract("C-EXC-02", f"{attack_module}:gather_rows", seeds=[7])
    assert v.verdict == "CRASH"
    assert _attacks_that_worked(v.reason) == []
    assert not (tmp_path / "pwned").exists()
    assert _no_daemon_survives()
    assert v.environment["isolation"]["mode"] == "bubblewrap"


def test_the_command_line_runs_the_same_sandbox(attack_module, tmp_path):
    done = subprocess.run([sys.executable, "-m", "workers.contracts", "check", "--contract", "C-EXC-02",
                           "--impl", f"{attack_module}:gather_rows", "--seeds", "7", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["verdict"] == "CRASH" and _attacks_that_worked(verdict["reason"]) == []
    assert verdict["environment"]["isolation"]["mode"] == "bubblewrap"
    assert not (tmp_path / "pwned").exists() and _no_daemon_survives()


def _in_pool_process(impl: str) -> tuple[str, str, str]:
    from workers.contracts import run_contract

    v = run_contract("C-EXC-02", impl, seeds=[7])
    return v.verdict, v.reason, v.environment.get("isolation", {}).get("mode")


def test_from_a_billiard_pool_process(attack_module):
    """Celery's prefork pool runs tasks in billiard processes; multiprocessing-based sandboxes failed there."""
    import billiard

    with billiard.get_context("fork").Pool(1) as pool:
        ref = pool.apply(_in_pool_process, (REF + "gather_rows",))
        hostile = pool.apply(_in_pool_process, (f"{attack_module}:gather_rows",))
    assert ref == ("PASS", ref[1], "bubblewrap")
    assert hostile[0] == "CRASH" and _attacks_that_worked(hostile[1]) == [] and hostile[2] == "bubblewrap"


def test_killing_everything_it_can_reach_only_ends_its_own_run(attack_module):
    with SessionPool() as pool:
        v = run_contract("C-EXC-02", f"{attack_module}:gather_then_kill_everything", seeds=[7], pool=pool)
        assert v.verdict == "CRASH"
        # the next contract of the same job gets a fresh sandbox and measures normally
        again = run_contract("C-EXC-02", REF + "gather_rows", seeds=[7], pool=pool)
    assert again.verdict == "PASS"
