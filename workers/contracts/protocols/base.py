"""Shared vocabulary of the protocols: the :class:`Case` a protocol asks the sandbox to run, the seeded
generators, and the numeric helpers (fp64 oracles, bitwise comparison, unit roundoff).

A protocol module defines (see any of ``prc01.py`` … ``exc02.py``):

* ``cases(contract, seeds) -> list[Case]`` — every candidate call, built in the *parent* from the seeds;
* ``measure(contract, cases, results) -> list[dict]`` — one measurement per point: ``{"point", "seed",
  "seed_class", "names", "cases"}``, where ``names`` binds the protocol's names (protocols/__init__.py)
  and the oracle is computed here, in fp64 on CPU, on the parent's own copies (spec §2 item 2);
* ``signature(contract, measurements) -> dict`` — the measured violation signature (``pattern`` is one of
  the protocol's patterns, or None);
* ``naive_args(contract, trial) -> tuple`` — inputs of the T4 "naive" functional check (spec §8 preamble);
* ``perturb(case) -> Case`` — the input-sensitivity partner of a case (spec §2 item 4).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

U32 = 2.0 ** -24


@dataclass
class Out:
    """Placeholder for a destination-passing output: the sandbox allocates it fresh and NaN-poisoned."""

    shape: tuple
    dtype: torch.dtype = torch.float32


@dataclass
class Case:
    key: str
    args: list
    kwargs: dict = field(default_factory=dict)
    expect_shape: tuple | None = None
    expect_dtype: torch.dtype | None = torch.float32
    expect_raise: bool = False        # an OOB probe: raising is recorded, not a CRASH
    repeat: int = 2                   # replay (spec §2 item 7); ORD-02 asks for R launches
    interleave: bool = False          # run unrelated work between repeats (ORD-02)
    all_configs: bool = False         # CMP-02: force every config in impl.configs
    order: str = "candidate_first"    # or "reference_first" (the reversed-order repeat, spec §2 item 2)
    reference: str | None = None      # trusted reference run first when order == "reference_first"
    meta: dict = field(default_factory=dict)  # point, seed, seed_class, sensitivity_of, ...

    @property
    def out_index(self):
        for i, a in enumerate(self.args):
            if isinstance(a, Out):
                return i
        return None


def generator(*key) -> torch.Generator:
    """A CPU generator seeded from a stable hash of ``key`` (the seed, the class, the sweep point)."""
    h = hashlib.sha256(repr(key).encode()).digest()
    g = torch.Generator()
    g.manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))
    return g


def randn(shape, g, dtype=torch.float32):
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of a float tensor for bitwise comparison (NaN payloads included)."""
    t = t.contiguous()
    view = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
            torch.bfloat16: torch.int16}.get(t.dtype)
    return t.view(view) if view is not None else t


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool((bits(a) == bits(b)).all())


def abs_err(out: torch.Tensor, ref64: torch.Tensor) -> torch.Tensor:
    """|out - ref| in fp64 with NaN in ``out`` (where ref is not NaN) mapped to +inf: a poisoned or
    garbage output must never look small."""
    e = (out.double() - ref64).abs()
    return torch.where(torch.isnan(e), torch.full_like(e, float("inf")), e)


def fmax(t: torch.Tensor) -> float:
    return float(t.max()) if t.numel() else 0.0


def ftz_enabled() -> bool:
    """True if the CPU currently flushes subnormals (FTZ/DAZ), probed rather than assumed."""
    x = torch.tensor([2.0 ** -140], dtype=torch.float32)
    return float(x * torch.tensor([1.5], dtype=torch.float32)) == 0.0


def seed_meta(seed, seed_class, **point):
    return {"seed": seed, "seed_class": seed_class, "point": point}


def loglog_slope(xs, ys):
    """Least-squares slope of log y against log x (for 'flat' vs 'growing' signatures)."""
    import math

    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0 and math.isfinite(y)]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def first_output(result):
    """The first replay's output tensor of a case result (None if the call failed)."""
    outs = result.get("outputs") or []
    return outs[0] if outs else None
