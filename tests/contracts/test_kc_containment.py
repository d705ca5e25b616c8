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


def _worker_paths(tmp_path) -> list[str]:
    """Host paths that say where the worker runs; the base interpreter's own directory is left out (the venv's
    interpreter symlink needs it at its path, and it names only a Python installation)."""
    paths = {str(ROOT), os.path.realpath(ROOT), sys.prefix, os.path.realpath(sys.prefix), str(tmp_path)}
    if sys.prefix == sys.base_prefix:  # not a virtualenv: the interpreter's own prefix is all there is
        paths -= {sys.prefix, os.path.realpath(sys.prefix)}
    return sorted(paths)


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
    header = (
        f"CANARY_FILES = {[str(secret), str(ROOT / 'README.md'), '/etc/shadow']!r}\n"
        f"CANARY_TEXT = {CANARY!r}\nHOST_PORT = {listener.getsockname()[1]}\nTEST_PID = {os.getpid()}\n"
        f"WRITE_TARGET = {str(tmp_path / 'pwned')!r}\n"
        f"HOST_PATHS = {_worker_paths(tmp_path)!r}\n"
    )
    source = ATTACKS.read_text().replace(
        'CANARY_FILES: list = []\nCANARY_TEXT = ""\nHOST_PORT = 0\nTEST_PID = 0\nWRITE_TARGET = ""\nHOST_PATHS: list = []\n',
        header,
    )
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
    for _ in range(300):
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
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "workers.contracts",
            "check",
            "--contract",
            "C-EXC-02",
            "--impl",
            f"{attack_module}:gather_rows",
            "--seeds",
            "7",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["verdict"] == "CRASH" and _attacks_that_worked(verdict["reason"]) == []
    assert verdict["environment"]["isolation"]["mode"] == "bubblewrap"
    assert not (tmp_path / "pwned").exists() and _no_daemon_survives()


POOL_SCRIPT = """
import json, sys
import billiard
from workers.contracts import run_contract

def measure(impl):
    v = run_contract("C-EXC-02", impl, seeds=[7])
    return [v.verdict, v.reason, v.environment.get("isolation", {}).get("mode")]

if __name__ == "__main__":
    # Celery's prefork pool: billiard forks daemonic worker processes and the task runs in one of them
    with billiard.get_context("fork").Pool(1) as pool:
        print(json.dumps([pool.apply(measure, (impl,)) for impl in sys.argv[1:]]))
"""


def test_from_a_billiard_pool_process(attack_module, tmp_path):
    """Celery's prefork pool runs tasks in billiard processes; the multiprocessing-based sandbox failed there
    ('Pickling an AuthenticationString object is disallowed'). A fresh interpreter forks the pool (forking this
    multi-threaded test process could deadlock for reasons of its own)."""
    script = tmp_path / "pool_check.py"
    script.write_text(POOL_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), REF + "gather_rows", f"{attack_module}:gather_rows"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ref, hostile = json.loads(done.stdout.strip().splitlines()[-1])
    assert ref[0] == "PASS" and ref[2] == "bubblewrap", ref
    assert hostile[0] == "CRASH" and _attacks_that_worked(hostile[1]) == [] and hostile[2] == "bubblewrap"


def _zygotes(pool):
    return sorted(s.proc.pid for s in pool._sessions.values() if s.proc is not None and s.proc.poll() is None)


def test_signalling_everything_it_can_reach_harms_nothing_and_still_gets_a_verdict(attack_module):
    """kill(-1) and every signal at the zygote: the zygote is the pid namespace's init, which the kernel shields
    from its namespace, so the run is measured like any other (its answer is right: PASS), the same sandbox serves
    the next run, and a process of the sandbox's own uid outside the sandbox lives on."""
    as_sandbox_uid = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    bystander = subprocess.Popen(as_sandbox_uid + ["sleep", "300"])
    try:
        with SessionPool() as pool:
            hostile = f"{attack_module}:gather_then_kill_everything"
            first = run_contract("C-EXC-02", hostile, seeds=[7], pool=pool)
            zygote = _zygotes(pool)
            second = run_contract("C-EXC-02", hostile, seeds=[7], pool=pool)
            assert _zygotes(pool) == zygote and len(zygote) == 1  # the same sandbox, never restarted
            ref = run_contract("C-EXC-02", REF + "gather_rows", seeds=[7], pool=pool)
        assert (first.verdict, second.verdict, ref.verdict) == ("PASS", "PASS", "PASS"), (first.reason, second.reason)
        assert first.environment["isolation"]["mode"] == "bubblewrap"
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


PATCHER = str(Path(__file__).with_name("kc_patcher.py"))


def test_import_time_patching_cannot_buy_determinism():
    """The kernel rebinds the harness's encoder (through stack frames and __main__), hashlib, pickle and torch
    methods so that every launch reports the same bytes: the parent still sees the launches differ."""
    v = run_contract("C-ORD-02", f"{PATCHER}:row_sum", seeds=[7])
    assert v.verdict == "FAIL", v.reason
    assert v.signature["pattern"] == "run_to_run_variation" and v.signature["distinct_outputs"] > 1


def test_import_time_patching_cannot_hide_an_in_place_write():
    v = run_contract("C-PRC-03", f"{PATCHER}:mul", seeds=[7])
    assert v.verdict == "FAIL"
    assert "input_mutated" in {f["kind"] for f in v.findings}


HARNESS_SNIFFER = '''
import os, sys
import torch

def _sees_harness():
    return (any(m == "workers" or m.startswith("workers.") for m in sys.modules)
            or any(k.startswith("KC_") for k in os.environ))

def rms_norm(x, out, eps=1e-6):
    """Writes its result only into an all-NaN buffer (what the old harness always passed)."""
    if bool(torch.isnan(out).all()):
        out.copy_(x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))
    return out

def gather_rows(data, idx):
    """Exact only when it recognises the harness; zero-fills out-of-bounds rows otherwise."""
    if _sees_harness():
        return torch.index_select(data, 0, idx)
    ok = (idx >= 0) & (idx < data.shape[0])
    out = torch.zeros(idx.shape[0], data.shape[1], dtype=data.dtype)
    out[ok] = data[idx[ok]]
    return out
'''


@pytest.mark.parametrize("contract,function", [("C-CMP-01", "rms_norm"), ("C-EXC-02", "gather_rows")])
def test_a_kernel_that_behaves_only_under_the_harness_fails(tmp_path, contract, function):
    """No marker tells the kernel it is measured (no harness module, no KC_* variable, destinations not always
    NaN), so the behaviour it shows users is the behaviour that is graded."""
    path = tmp_path / "user_kernels.py"
    path.write_text(HARNESS_SNIFFER)
    v = run_contract(contract, f"{path}:{function}", seeds=[7])
    assert v.verdict == "FAIL", v.reason


def test_a_kernel_file_named_like_the_reference_is_never_confused_with_it(tmp_path):
    """C-CMP-01 stages the trusted reference module next to the candidate; a candidate file of the same name gets
    its own name in the sandbox, in this run and in the next one that reuses the sandbox."""
    path = tmp_path / "reference.py"
    path.write_text("def rms_norm(x, out, eps=1e-6):\n    return out  # never writes\n")
    with SessionPool() as pool:
        for _ in range(2):
            v = run_contract("C-CMP-01", f"{path}:rms_norm", seeds=[7], pool=pool)
            assert v.verdict == "FAIL" and v.signature["sentinel_survival"] == 1.0


WORKER_SCRIPT = """
import sys
from workers.contracts import run_contract
print("running", flush=True)
run_contract("C-EXC-02", sys.argv[1], seeds=[7], time_limit_s=600)
"""

HANGING_KERNEL = """
import subprocess, sys, time

def gather(data, idx):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", MARKER])
    time.sleep(600)
"""


def test_a_worker_killed_mid_run_leaves_nothing_of_its_sandbox(tmp_path):
    """The worker is SIGKILLed while the kernel hangs with a helper process: the zygote sees its channels close and
    exits, and as the namespace's init takes every process of the sandbox with it."""
    marker = f"kc-orphan-{os.getpid()}-{time.monotonic_ns()}"
    kernel = tmp_path / "hangs.py"
    kernel.write_text(f"MARKER = {marker!r}\n" + HANGING_KERNEL)
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER_SCRIPT, f"{kernel}:gather"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert worker.stdout.readline().strip() == "running"
        for _ in range(1200):  # the helper exists once the sandbox is up and the kernel is running
            if processes_with(marker):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the kernel never started its helper")
    finally:
        worker.kill()
        worker.wait()
    for _ in range(300):
        if not processes_with(marker):
            return
        time.sleep(0.1)
    raise AssertionError(f"the sandbox's processes outlived the worker: {processes_with(marker)}")
