"""How a submitted kernel is contained: the bubblewrap command line, and the operator's policy when it cannot be built.

The boundary is the operating system's, built with bubblewrap (Debian package ``bubblewrap``):

* new pid, network, IPC, UTS and mount namespaces (and a user namespace when the worker is not root): no network
  at all (only a loopback of its own), no view of other processes, no way to signal the worker;
* a root filesystem made of read-only binds of ``/usr`` and the Python environment (a virtualenv at ``/opt/venv``
  whatever its host path, the base interpreter at its own), the sandbox program and the one staged implementation
  file — no artifact store, no signing key, no project checkout, nothing of the host's ``/etc`` beyond the dynamic
  linker's cache and the public files listed below; the paths it runs under (``sys.path``, the command line) do
  not name the worker's (the sources of the binds still show in ``/proc/self/mountinfo``: docs/contracts.md,
  *Not done / limits*);
* private, size-capped tmpfs for ``/tmp``, the home directory and ``/dev/shm``, a minimal ``/dev``, a ``/proc`` of
  its own pid namespace, ``/sys`` read-only;
* an unprivileged uid (``AUDIT_SANDBOX_UID``, default 65534): a root worker drops to it with ``setpriv`` (no
  capabilities, empty bounding set, no-new-privileges) after bubblewrap has built the mounts; a non-root worker
  maps it in a user namespace;
* an environment built from scratch (``--clearenv``): no database, broker or signing credentials, no
  ``KC_*`` variables; only what Python and the numeric libraries read, and what an ordinary container process has;
* a process that looks like an ordinary one, so that nothing tells a kernel it is being judged (docs/contracts.md,
  *Threat model*): a plain ``python run.py`` (no ``-I``/``-B``: ``sys.flags`` as in any script; the cleared
  environment and the empty home give ``-I`` nothing to do), a container's environment (``PATH``, ``HOSTNAME``,
  ``HOME``), a home directory it works in, and an ``/etc`` with ``passwd``, ``group``, ``hostname`` and ``hosts``
  naming its uid as an ordinary user;
* the sandbox program runs as the pid namespace's init (``--as-pid-1``): processes inside the namespace cannot
  signal it (the kernel drops every signal init does not handle, SIGKILL and SIGSTOP included), so the process
  that reports a run's end outlives anything the candidate does;
* ``--die-with-parent``: if the worker dies, the sandbox dies; and when the pid namespace's first process exits
  every descendant is killed by the kernel, so nothing survives a run.

``AUDIT_KERNEL_ISOLATION`` is the operator's choice: ``bubblewrap`` (default) refuses to run submitted code when the
sandbox cannot be created; ``none`` explicitly allows the unisolated mode (a plain subprocess with a cleared
environment) and every verdict then records that it ran unisolated.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

POLICY_ENV = "AUDIT_KERNEL_ISOLATION"
UID_ENV = "AUDIT_SANDBOX_UID"
POLICIES = ("bubblewrap", "none")
APP_PATH = "/opt/app/run.py"  # the sandbox program, as the candidate sees it (a name that says nothing)
LIB_DIR = "/opt/lib"  # the staged implementation module(s)
VENV_PATH = "/opt/venv"  # the worker's virtualenv, as the candidate sees it
HOME_PATH = "/home/user"  # the candidate's home and working directory, a capped tmpfs emptied after every run
USER_NAME = "user"
TMP_BYTES = 256 * 2**20
HOME_BYTES = 64 * 2**20
SHM_BYTES = 64 * 2**20
# a container runtime's default PATH (the variables an ordinary containerised process starts with: PATH, HOSTNAME,
# HOME)
ORDINARY_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# what Python and the numeric libraries may read; nothing else of the worker's environment enters the sandbox
PASSED_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "LANG",
    "LC_ALL",
)


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be created here and the operator has not allowed unisolated runs."""


def policy() -> str:
    value = os.environ.get(POLICY_ENV, "bubblewrap").strip().lower() or "bubblewrap"
    if value not in POLICIES:
        raise SandboxUnavailable(f"{POLICY_ENV}={value!r} is not one of {', '.join(POLICIES)}")
    return value


def sandbox_uid() -> int:
    return int(os.environ.get(UID_ENV, "65534"))


def _python_roots() -> list[tuple[str, str]]:
    """(source, target) binds for the interpreter and its packages.

    A virtualenv is bound at VENV_PATH, whatever its path on the host: the worker's checkout path (``/srv/…``,
    ``/check/…``) names where it runs, and a candidate that read it in ``/proc/self/cmdline`` or ``sys.path`` could
    behave honestly only there. The base interpreter the venv's ``bin/python`` points to stays at its own path (the
    venv's symlink and the interpreter's compiled-in library path need it); each base directory is bound at the path
    Python uses for it and at its real location; nested directories need no bind of their own."""
    import itertools

    venv = os.path.realpath(sys.prefix) if _in_virtualenv() else None
    paths = [sys.base_prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))]
    if venv is None:
        paths += [sys.prefix, os.path.dirname(os.path.dirname(sys.executable))]
    binds = {}
    for p in itertools.chain(paths, (os.path.realpath(p) for p in paths)):
        p = os.path.abspath(p)
        inside_venv = venv is not None and (p == venv or p.startswith(venv + "/"))
        if p and os.path.isdir(p) and p != "/usr" and not p.startswith("/usr/") and not inside_venv:
            binds.setdefault(p, os.path.realpath(p))
    roots = [
        (src, dst)
        for dst, src in sorted(binds.items())
        if not any(dst != q and dst.startswith(q.rstrip("/") + "/") for q in binds)
    ]
    return roots + ([(venv, VENV_PATH)] if venv is not None else [])


def _in_virtualenv() -> bool:
    return sys.prefix != sys.base_prefix


def interpreter() -> str:
    """The Python the sandbox runs, at the path the candidate sees it."""
    if _in_virtualenv():
        return f"{VENV_PATH}/bin/{os.path.basename(sys.executable)}"
    return sys.executable


def _system_dirs() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += ["--perms", "0755", "--dir", "/etc"]  # bubblewrap would make it 0700: an /etc nobody reads is a tell
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d") + HOST_ETC:
        args += ["--ro-bind-try", f, f]
    for f in ETC_LINKS:  # links into /usr, as on the host (the file behind each is already there, read-only)
        target = os.readlink(f) if os.path.islink(f) else None
        if target and os.path.realpath(f).startswith("/usr/"):
            args += ["--symlink", target, f]
    args += ["--symlink", "../proc/self/mounts", "/etc/mtab"]
    # what any Linux process finds: /sys read-only (as a container runtime gives it), /run and /var
    args += ["--ro-bind-try", "/sys", "/sys"]
    args += ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", "/var", "--symlink", "../tmp", "/var/tmp"]
    return args


ETC_FILES = ("passwd", "group", "hostname", "hosts")  # written for the sandbox (write_etc)
# the host's, read-only: no secret in them, and a process without them stands out
HOST_ETC = ("/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/ssl")
ETC_LINKS = ("/etc/os-release", "/etc/localtime")


def write_etc(directory: str) -> str:
    """The /etc files an ordinary process finds (``pwd.getpwuid(os.getuid())``, ``socket.gethostname()`` resolved
    through ``hosts``), written into ``directory`` for read-only binds; returns it."""
    uid, host = sandbox_uid(), socket.gethostname()
    texts = {
        "passwd": f"root:x:0:0:root:/root:/bin/sh\n{USER_NAME}:x:{uid}:{uid}::{HOME_PATH}:/bin/sh\n",
        "group": f"root:x:0:\n{USER_NAME}:x:{uid}:\n",
        "hostname": f"{host}\n",
        "hosts": f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{host}\n",
    }
    os.makedirs(directory, exist_ok=True)
    os.chmod(directory, 0o755)
    for name in ETC_FILES:
        path = os.path.join(directory, name)
        with open(path, "w") as fh:
            fh.write(texts[name])
        os.chmod(path, 0o644)
    return directory


def _parents(path: str, made: set) -> list[str]:
    """Directories above a bind target, created traversable (bubblewrap would create them 0700 as root, and the
    sandbox's unprivileged uid could not reach what is bound below them)."""
    args, parts = [], path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/" + "/".join(parts[:i])
        if d not in made:
            made.add(d)
            args += ["--perms", "0755", "--dir", d]
    return args


def _gpu_devices() -> list[str]:
    args = []
    for dev in sorted(Path("/dev").glob("nvidia*")):
        args += ["--dev-bind-try", str(dev), str(dev)]
    return args


def _env_args() -> list[str]:
    # what a container runtime gives a process, nothing that says "sandbox": no TMPDIR (/tmp is the default), no
    # PYTHONDONTWRITEBYTECODE (every path Python could write bytecode to is read-only, and the flag shows in sys.flags)
    args = ["--clearenv", "--setenv", "PATH", ORDINARY_PATH, "--setenv", "HOSTNAME", socket.gethostname()]
    args += ["--setenv", "HOME", HOME_PATH]
    for name in PASSED_ENV:
        if name in os.environ:
            args += ["--setenv", name, os.environ[name]]
    return args


def bubblewrap_argv(
    program: str | None,
    lib_dir: str | None,
    device: str,
    command: list[str] | None = None,
    etc_dir: str | None = None,
) -> list[str]:
    """The command that starts ``command`` (default: the sandbox program, bound at APP_PATH) under bubblewrap;
    ``etc_dir`` holds the files :func:`write_etc` made."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SandboxUnavailable("bubblewrap is not installed (Debian: apt-get install bubblewrap)")
    uid = sandbox_uid()
    as_root = os.geteuid() == 0
    # --as-pid-1: the sandbox program is the pid namespace's init, and the kernel delivers no signal to a namespace's
    # init from inside it unless init handles it (no SIGKILL, no SIGSTOP): a candidate sharing its uid cannot end the
    # zygote that reports its exit, so a kill(-1) costs the candidate its own run and nothing more
    argv = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--as-pid-1",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if not as_root:
        argv += ["--unshare-user", "--uid", str(uid), "--gid", str(uid), "--cap-drop", "ALL"]
    # the tmpfs first: a Python environment that lives under /tmp is bound on top of it, not hidden by it
    argv += ["--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp"] + _system_dirs()
    made = {"/tmp"}
    argv += _parents(HOME_PATH, made) + ["--perms", "1777", "--size", str(HOME_BYTES), "--tmpfs", HOME_PATH]
    for source, target in _python_roots():
        argv += _parents(target, made) + ["--ro-bind", source, target]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    # a writable /dev/shm, as every process has (multiprocessing's locks live there), capped and emptied per child
    argv += ["--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
    if etc_dir:
        for name in ETC_FILES:
            argv += ["--ro-bind", os.path.join(etc_dir, name), f"/etc/{name}"]
    if program:
        argv += _parents(APP_PATH, made) + ["--ro-bind", program, APP_PATH]
    if lib_dir:
        argv += _parents(LIB_DIR, made) + ["--ro-bind", lib_dir, LIB_DIR]
    if device.startswith("cuda"):
        argv += _gpu_devices()
    argv += ["--chdir", HOME_PATH] + _env_args() + ["--"]
    if as_root:  # bubblewrap built the mounts as root; the program itself runs as an unprivileged uid
        argv += [
            shutil.which("setpriv") or "/usr/bin/setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--no-new-privs",
            "--",
        ]
    return argv + (command or [interpreter(), APP_PATH])


def unisolated_argv(program: str) -> list[str]:
    return [sys.executable, program]


def unisolated_env(scratch: str) -> dict:
    env = {"HOME": scratch, "TMPDIR": scratch, "PATH": ORDINARY_PATH, "HOSTNAME": socket.gethostname()}
    env.update({k: os.environ[k] for k in PASSED_ENV if k in os.environ})
    return env


@functools.lru_cache(maxsize=4)
def probe(device: str = "cpu") -> str | None:
    """None when bubblewrap can build this sandbox here (namespaces, binds, the uid drop), else why not; cached per
    process."""
    try:
        argv = bubblewrap_argv(None, None, device, command=[interpreter(), "-c", "pass"])
        done = subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    except SandboxUnavailable as exc:
        return str(exc)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not be started: {exc}"
    if done.returncode != 0:
        return f"bubblewrap cannot create the sandbox here: {done.stderr.decode(errors='replace').strip()[:300]}"
    return None


def describe(mode: str, device: str) -> dict:
    """What a verdict records about the isolation it ran under."""
    if mode == "none":
        return {
            "mode": "none",
            "boundary": "none: operator allowed unisolated runs "
            f"({POLICY_ENV}=none); the kernel ran with the worker's user and network",
        }
    return {
        "mode": "bubblewrap",
        "uid": sandbox_uid(),
        "network": "none",
        "namespaces": ["pid", "net", "ipc", "uts", "mount"] + ([] if os.geteuid() == 0 else ["user"]),
        "filesystem": "read-only Python environment and the submitted module; private tmpfs",
        "device": device,
    }
