"""Shared helpers for the contract-engine tests (imported as a module; test files are prefixed test_kc_ so
their names cannot collide with other engines' tests)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
HOSTILE = str(HERE / "kc_hostile.py")
REF = "workers.contracts.impls.reference:"
VIOL = "workers.contracts.impls.violating:"


def hostile(name: str) -> str:
    return f"{HOSTILE}:{name}"


def processes_with(marker: str) -> list[int]:
    """Pids of live (not zombie) processes on this machine whose command line contains ``marker``."""
    import os

    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{d}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state != "Z":
            found.append(int(d))
    return found
