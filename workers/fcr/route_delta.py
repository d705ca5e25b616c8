"""The trainer's MoE routes stored as their difference from the rollout's (fcr-parquet/1 column
``trainer_routes_delta``; docs/run-log-parquet.md).

Parquet compresses each column on its own, so a trainer route column that repeats the rollout's 99 % of the time
costs as much as the rollout's (≈ 7 bytes per token and layer for 128 experts, top-8). The delta column has the
rollout column's length and holds, per expert slot, :data:`SAME` where the trainer's id equals the rollout's and the
trainer's id where it does not; a column that is almost all one value compresses to almost nothing
(``bench/routing.py`` measures it). Lossless for ids, with one normalisation: a negative trainer id ("not recorded")
is stored as −1 where the rollout's differs, since every negative id means the same.

No Django import; the client library writes the same encoding (client/audit_portal_client/fcr.py, tested against
:func:`decode`).
"""

from __future__ import annotations

import numpy as np

COLUMN = "trainer_routes_delta"
SAME = -32768  # int16 minimum: never an expert id (0 … 32767) and never −1, the one "not recorded" value written


def encode(rollout, trainer) -> np.ndarray | None:
    """The delta of two route arrays of one shape (any shape; flattened int16), or None when they cannot be
    encoded against each other (absent, empty or of different shapes: then the trainer's routes are written whole
    and the format check names any problem)."""
    if rollout is None or trainer is None:
        return None
    r, t = np.asarray(rollout), np.asarray(trainer)
    if (
        r.shape != t.shape
        or not r.size
        or not np.issubdtype(t.dtype, np.integer)
        or not np.issubdtype(r.dtype, np.integer)
    ):
        return None
    return np.where(t == r, SAME, np.where(t < 0, -1, t)).astype(np.int16).reshape(-1)


def decode(rollout_flat, delta_flat) -> tuple[np.ndarray | None, str | None]:
    """``(trainer routes, flat, None)`` from the rollout's flat routes and the delta, or ``(None, reason)``."""
    if rollout_flat is None:
        return None, "the trainer's routes are stored as a difference from rollout.routed_experts, which is absent"
    r, d = np.asarray(rollout_flat), np.asarray(delta_flat)
    if r.shape != d.shape:
        return None, (
            f"{d.size} values in {COLUMN} but {r.size} in rollout_routed_experts (a difference needs the same length)"
        )
    return np.where(d == SAME, r, d), None
