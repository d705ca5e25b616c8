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

