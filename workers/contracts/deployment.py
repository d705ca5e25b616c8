"""Deployment flags and targets for KC-A / KC-T (docs/contract-language.md#grades), validated without torch (the
portal's web process reads them from submissions).

KC-A is the capability vector *as deployed*: the classes a deployment flag can change (grading.RISKY_FLAGS, and a
contract whose precondition.env the flag contradicts) are measured again with the flags applied in the sandbox
(sandbox.apply_flags sets them); KC-T is the level per family a deployment needs, e.g. ``{"ORD": 3}``.
"""

from __future__ import annotations

import json

from .schema import FAMILY_CODE

BOOLEAN = (True, False)
# flag -> allowed values (a tuple) or type; the names sandbox.apply_flags knows
DEPLOYMENT_FLAGS: dict[str, tuple | type] = {
    "allow_tf32": BOOLEAN,
    "allow_hf32": BOOLEAN,
    "allow_fp16_reduced_precision_reduction": BOOLEAN,
    "allow_bf16_reduced_precision_reduction": BOOLEAN,
    "flush_denormal": BOOLEAN,
    "deterministic_algorithms": BOOLEAN,
    "cudnn_benchmark": BOOLEAN,
    "float32_matmul_precision": ("highest", "high", "medium"),
    "num_threads": int,
}
FAMILIES = tuple(FAMILY_CODE.values())  # PRC, ORD, CMP, EXC
LEVELS = range(0, 5)


def _object(raw, what: str) -> dict:
    if raw in (None, "", {}):
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ValueError(f"{what} must be a JSON object, got {raw[:60]!r}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{what} must be an object, not {type(raw).__name__}")
    return raw


def parse_flags(raw) -> dict:
    """Deployment flags (a dict or its JSON) → a validated dict; ValueError naming the flag otherwise."""
    flags = _object(raw, "deployment_flags")
    for name, value in flags.items():
        allowed = DEPLOYMENT_FLAGS.get(name)
        if allowed is None:
            raise ValueError(f"unknown deployment flag {name!r}; known: {', '.join(DEPLOYMENT_FLAGS)}")
        if allowed is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"deployment flag {name!r} must be a positive integer, got {value!r}")
        elif allowed is BOOLEAN:
            if not isinstance(value, bool):
                raise ValueError(f"deployment flag {name!r} must be true or false, got {value!r}")
        elif value not in allowed:
            raise ValueError(f"deployment flag {name!r} must be one of {', '.join(map(str, allowed))}, got {value!r}")
    return dict(flags)


def parse_target(raw) -> dict:
    """KC-T: ``{"PRC": 3, ...}`` or ``"PRC=3, ORD=2"`` → a validated dict of family code → level 0–4."""
    if isinstance(raw, str) and raw.strip() and not raw.strip().startswith("{"):
        pairs = [p.split("=", 1) for p in raw.replace(";", ",").split(",") if p.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ValueError(f"target must look like 'PRC=3, ORD=2', got {raw[:60]!r}")
        raw = {k.strip(): v.strip() for k, v in pairs}
    target = _object(raw, "target")
    out = {}
    for family, level in target.items():
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r} in target; use {', '.join(FAMILIES)}")
        try:
            level = int(level)
        except (TypeError, ValueError):
            raise ValueError(f"target level for {family} must be 0–4, got {level!r}") from None
        if level not in LEVELS:
            raise ValueError(f"target level for {family} must be 0–4, got {level}")
        out[family] = level
    return out
