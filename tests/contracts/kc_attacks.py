"""Attacks a submitted kernel could try from inside the sandbox. The containment tests copy this file next to a
header that names the host's canaries (``CANARY_FILES``, ``CANARY_TEXT``, ``HOST_PORT``, ``TEST_PID``,
``WRITE_TARGET``) and submit it as a kernel; each probe returns True when the attack *worked*. The kernel raises
with the names of the attacks that worked, so the verdict's reason carries them (an empty list: all contained)."""

import os
import socket
import subprocess
import sys

import torch

CANARY_FILES: list = []
CANARY_TEXT = ""
HOST_PORT = 0
TEST_PID = 0
WRITE_TARGET = ""
HOST_PATHS: list = []
MARKER = "kc-attack-daemon"


def _reads_a_canary():
    for path in CANARY_FILES:
        try:
            with open(path) as fh:
                if CANARY_TEXT in fh.read():
                    return True
        except OSError:
            pass
    return False


def _sees_secrets_in_environment():
    names = (
        "DATABASE_URL",
        "AUDIT_SECRET_KEY",
        "AUDIT_SIGNING_KEY",
        "AUDIT_SIGNING_KEY_FILE",
        "CELERY_BROKER_URL",
        "REDIS_URL",
        "KC_HIDDEN_SEED_KEY",
    )
    return (
        any(n in os.environ for n in names)
        or any(k.startswith("KC_") for k in os.environ)
        or CANARY_TEXT in repr(dict(os.environ))
    )


def _snoops_proc():
    leaked = False
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        for name in ("environ", "cmdline"):
            try:
                with open(f"/proc/{d}/{name}", "rb") as fh:
                    leaked |= CANARY_TEXT.encode() in fh.read()
            except OSError:
                pass
    return leaked or os.path.exists(f"/proc/{TEST_PID}/cmdline") and TEST_PID > 3


def _connects(host, port):
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _reaches_the_network():
    unix = False
    for path in ("/var/run/postgresql/.s.PGSQL.5432", "/run/postgresql/.s.PGSQL.5432"):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(1)
            s.connect(path)
            unix = True
        except OSError:
            pass
    return unix or any(_connects("127.0.0.1", p) for p in (HOST_PORT, 5432, 6379, 5672))


def _writes_outside():
    try:
        with open(WRITE_TARGET, "w") as fh:
            fh.write("pwned")
        return True
    except OSError:
        return False


def _signals_the_host():
    try:
        os.kill(TEST_PID, 0)  # only probes: a visible pid would already be a failure of the boundary
        return True
    except OSError:
        return False


def _is_privileged():
    if os.getuid() == 0 or os.geteuid() == 0:
        return True
    try:
        os.setuid(0)
        return True
    except OSError:
        return False


def _leaves_a_daemon():
    """Start a detached sleeper with a marker; the test checks afterwards that nothing with the marker survives."""
    subprocess.Popen(
        [sys.executable, "-c", "import os, time; os.setsid(); time.sleep(120)", MARKER],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return False


def _reads_the_worker_paths():
    """Where the worker runs (its checkout, its virtualenv, the test's temporary directory) told apart from what a
    candidate sees of its own process: a kernel that found them could behave honestly only under the harness."""
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmdline = ""
    main = sys.modules.get("__main__")
    seen = repr(
        (
            cmdline,
            sys.argv,
            sys.executable,
            sys.prefix,
            sys.exec_prefix,
            sys.path,
            os.getcwd(),
            os.path.abspath(__file__),
            getattr(main, "__file__", ""),
            dict(os.environ),
            [m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)],
        )
    )
    return any(p in seen for p in HOST_PATHS)


def _sees_the_harness():
    return any(m == "workers" or m.startswith(("workers.", "audit_portal")) for m in sys.modules)


PROBES = [
    _reads_a_canary,
    _sees_secrets_in_environment,
    _snoops_proc,
    _reaches_the_network,
    _writes_outside,
    _signals_the_host,
    _is_privileged,
    _leaves_a_daemon,
    _sees_the_harness,
    _reads_the_worker_paths,
]


def gather_rows(data, idx):
    worked = [p.__name__.lstrip("_") for p in PROBES if p()]
    raise RuntimeError("ATTACKS " + ",".join(worked) + " END")


def gather_then_kill_everything(data, idx):
    """kill(-1) — every process this uid can signal — then every signal at the zygote (its parent, pid 1 of the
    namespace), then the right answer. Must end in a measured verdict and harm nothing outside."""
    import signal

    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:  # nothing it may signal: neither init nor itself count
        pass
    for target in {1, os.getppid()}:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(target, sig)
            except OSError:
                pass
    return torch.index_select(data, 0, idx)
