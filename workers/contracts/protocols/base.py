"""Shared vocabulary of the protocols: the :class:`Case` a protocol asks the sandbox to run, the seeded
generators, and the numeric helpers (fp64 oracles, bitwise comparison, unit roundoff).

A protocol module defines (see any of ``prc01.py`` … ``exc02.py``):

* ``cases(contract, seeds) -> list[Case]`` — every candidate call, built in the *parent* from the seeds;
* ``measure(contract, cases, results) -> list[dict]`` — one measurement per point: ``{"point", "seed",
  "seed_class", "names", "cases"}``, where ``names`` binds the protocol's names (protocols/__init__.py)
  and the oracle is computed here, in fp64 on CPU, on the parent's own copies (harness invariant 2,
  docs/contract-language.md#harness-invariants);
* ``signature(contract, measurements) -> dict`` — the measured violation signature (``pattern`` is one of
  the protocol's patterns, or None);
* ``naive_args(contract, trial) -> tuple`` — inputs of the T4 "naive" functional check
  (docs/contract-language.md#why-contracts);
* ``perturb(case) -> Case`` — the input-sensitivity partner of a case (harness invariant 4).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

U32 = 2.0**-24


@dataclass
class Out:
    """Placeholder for a destination-passing output: the sandbox allocates it fresh and NaN-poisoned."""

    shape: tuple
    dtype: torch.dtype = torch.float32
    alias_of: int | None = None  # an in-place call: the destination is (a fresh copy of) argument ``alias_of``


@dataclass
class Case:
    key: str
    args: list
    kwargs: dict = field(default_factory=dict)
    expect_shape: tuple | None = None
    expect_dtype: torch.dtype | None = torch.float32
    expect_raise: bool = False  # an OOB probe: raising is recorded, not a CRASH
    repeat: int = 2  # replay (harness invariant 7); ORD-02 asks for R launches
    interleave: bool = False  # run unrelated work between repeats (ORD-02)
    all_configs: bool = False  # CMP-02: force every config in impl.configs
    order: str = "candidate_first"  # or "reference_first" (the reversed-order repeat, harness invariant 2)
    reference: str | None = None  # trusted reference run first when order == "reference_first"
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
    view = {
        torch.float32: torch.int32,
        torch.float64: torch.int64,
        torch.float16: torch.int16,
        torch.bfloat16: torch.int16,
    }.get(t.dtype)
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
    x = torch.tensor([2.0**-140], dtype=torch.float32)
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


# ------------------------------------------------------------------------------------------------ sweeps
# The sweep of a contract (``measurement_protocol.sweep``, contract files v0.2.0 on) is data: fixed points measured
# under every seed (both ends of each declared dimension, tile boundaries), points drawn per seed inside declared
# ranges (irregular, prime or non-tile sizes; a hidden seed draws sizes the submitter cannot know), the value
# generator of each point, and a budget (elements and work per case, expressions over the dimensions) that every
# point is brought within. ``sweep_points`` turns it into the points one seed measures.
TILE = 8  # a "non_tile" size is not a multiple of 8 (so of no power-of-two tile of 8 or more)


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _draw_int(rng, lo: int, hi: int, kind: str) -> int:
    """One size in [lo, hi]: ``uniform``; ``log_uniform`` (every decade equally likely); ``non_tile`` (log-uniform,
    then moved off multiples of 8); ``prime`` (log-uniform, then the nearest prime not above hi)."""
    import math
    import random

    assert isinstance(rng, random.Random)
    if hi <= lo:
        return lo
    if kind == "uniform":
        return rng.randint(lo, hi)
    v = int(round(math.exp(rng.uniform(math.log(max(lo, 1)), math.log(max(hi, 1)))))) if hi > 0 else lo
    v = min(max(v, lo), hi)
    if kind == "non_tile" and v % TILE == 0:
        v = v + rng.randint(1, TILE - 1) if v + TILE - 1 <= hi else v - rng.randint(1, min(TILE - 1, v - lo) or 1)
        v = min(max(v, lo), hi)
    elif kind == "prime":
        down = v
        while down >= max(lo, 2) and not _is_prime(down):
            down -= 1
        up = v
        while up <= hi and not _is_prime(up):
            up += 1
        cands = [p for p in (down, up) if lo <= p <= hi and _is_prime(p)]
        v = min(cands, key=lambda p: abs(p - v)) if cands else v
    return v


def _within_budget(point: dict, budget: dict) -> bool:
    from ..expr import parse

    env = {k: float(v) for k, v in point.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for expr_key, max_key in (("elements", "max_elements"), ("work", "max_work")):
        if budget.get(expr_key) is not None and budget.get(max_key) is not None:
            if parse(budget[expr_key]).evaluate(env) > float(parse(budget[max_key]).evaluate({})):
                return False
    return True


def _shrink(point: dict, budget: dict, dims: dict, rng) -> dict:
    """Halve the largest drawn dimension (keeping its kind) until the point fits the budget."""
    p = dict(point)
    for _ in range(128):
        if _within_budget(p, budget):
            return p
        name = max(
            (d for d in dims if isinstance(p.get(d), int) and p[d] > int(dims[d]["range"][0])),
            key=lambda d: p[d],
            default=None,
        )
        if name is None:
            break
        lo = int(dims[name]["range"][0])
        p[name] = _draw_int(rng, lo, max(lo, p[name] // 2), dims[name].get("kind", "log_uniform"))
    return p


def sweep_points(contract, seed, defaults: dict) -> list[dict]:
    """The points one seed measures: the contract's fixed ``sweep.points`` then ``sweep.draw.count`` points drawn
    from the seed. Every point has every key of ``defaults`` (dimensions, ``value``, ``layout``); drawn points
    carry ``drawn: True``. A contract without a ``sweep`` block (v0.1.0 files) falls back to the old ``sweeps``
    lists: the cross product of their values over ``defaults``."""
    import itertools
    import random

    params = contract.protocol_params
    sweep = params.get("sweep")
    if not sweep:
        old = params.get("sweeps") or {}
        keys = [k for k in defaults if k in old]
        out = []
        for combo in itertools.product(*[list(old[k]) for k in keys]):
            out.append(dict(defaults, **dict(zip(keys, combo))))
        return out or [dict(defaults)]
    budget = sweep.get("budget") or {}
    out = [dict(defaults, **p) for p in sweep.get("points") or []]
    draw = sweep.get("draw") or {}
    if draw.get("count"):
        h = hashlib.sha256(repr(("sweep", contract.cls, int(seed))).encode()).digest()
        rng = random.Random(int.from_bytes(h[:8], "little"))
        dims = draw.get("dims") or {}
        values = list(draw.get("values") or [defaults.get("value")])
        offset = rng.randrange(len(values))
        for i in range(int(draw["count"])):
            p = dict(defaults)
            for name, spec in dims.items():
                lo, hi = int(spec["range"][0]), int(spec["range"][1])
                p[name] = _draw_int(rng, lo, hi, spec.get("kind", "log_uniform"))
            p["value"] = values[(offset + i) % len(values)]
            if draw.get("layouts"):
                p["layout"] = draw["layouts"][(offset + i) % len(draw["layouts"])]
            p = _shrink(p, budget, dims, rng)
            p["drawn"] = True
            out.append(p)
    out += reach_points(contract, seed, defaults)
    return out


def point_label(point: dict) -> dict:
    """The point as recorded in a measurement (the drawn flag and defaults kept, so coverage can say which)."""
    return {k: v for k, v in point.items() if v is not None}


def scaled_rows(x: torch.Tensor, g, low_exp: float, high_exp: float) -> torch.Tensor:
    """Scale each row by 10**-e, e uniform in [low_exp, high_exp] (near-zero-norm rows)."""
    e = torch.rand((x.shape[0], 1), generator=g, dtype=torch.float64) * (high_exp - low_exp) + low_exp
    return (x.double() * 10.0 ** (-e)).to(x.dtype)


# ---------------------------------------------------------------- scope-reaching draws, value domains, layouts
# Issue #24. Contract files from v0.4.0 on may add to ``sweep.draw``:
#   reach: {count: 3, dims: [M, K, N]}   points drawn near the TOP of each named dimension's declared scope
#                                        (scope.shape_class.dims), the others small, within the budget;
#   layouts: [contiguous, padded_rows]   the layouts drawn points take (each one declared in shape_class.layouts);
# and ``values`` may name the shared generators of DOMAIN_VALUES. Older files have none of these keys and measure
# exactly what they measured before (the reach draws use their own random stream).
REACH_SPAN = 8  # a reaching size is drawn in [declared max / 8, declared max]
TAIL_TILE = 128  # the widest tile the tail generators aim past (a size off 128 is off 8, 16, 32 and 64 too)


def _shrink_others(point: dict, budget: dict, small: dict, large: str, rng) -> dict:
    """Bring a reaching point within the budget by cutting the other dimensions to a quarter..half at a time
    (down to their draw range's low end), the reaching one only when nothing else is left to shrink, so it
    stays as large as the budget allows."""
    p = dict(point)
    for _ in range(256):
        if _within_budget(p, budget):
            return p
        others = [d for d in small if d != large and isinstance(p.get(d), int) and p[d] > int(small[d]["range"][0])]
        name = max(others, key=lambda d: p[d], default=None)
        if name is None:
            name = large
            lo = int(small[name]["range"][0]) if name in small else 1
            if p[name] <= lo:
                break
            p[name] = _draw_int(rng, max(lo, p[name] // 4), max(lo, p[name] // 2), "non_tile")
            continue
        lo = int(small[name]["range"][0])
        kind = small[name].get("kind", "log_uniform")
        p[name] = _draw_int(rng, max(lo, p[name] // 4), max(lo, p[name] // 2), kind)
    return p


def reach_points(contract, seed, defaults: dict) -> list[dict]:
    """``draw.reach.count`` points per seed, each large in one dimension (cycling over ``draw.reach.dims`` from
    an offset drawn from the seed) and drawn off every tile in [declared max / 8, declared max], the other
    dimensions drawn from their ``draw.dims`` ranges and shrunk to the budget. Points carry ``drawn: True`` and
    ``reach: <dimension>``; value generator and layout cycle like the ordinary draws."""
    import random

    sweep = contract.protocol_params.get("sweep") or {}
    draw = sweep.get("draw") or {}
    reach = draw.get("reach") or {}
    names = list(reach.get("dims") or [])
    if not reach.get("count") or not names:
        return []
    declared = contract.data["scope"]["shape_class"].get("dims") or {}
    small = draw.get("dims") or {}
    budget = sweep.get("budget") or {}
    h = hashlib.sha256(repr(("reach", contract.cls, int(seed))).encode()).digest()
    rng = random.Random(int.from_bytes(h[:8], "little"))
    values = list(draw.get("values") or [defaults.get("value")])
    layouts = list(draw.get("layouts") or [defaults.get("layout")])
    first = rng.randrange(len(names))
    out = []
    for i in range(int(reach["count"])):
        large = names[(first + i) % len(names)]
        p = dict(defaults)
        for name, spec in small.items():
            p[name] = _draw_int(rng, int(spec["range"][0]), int(spec["range"][1]), spec.get("kind", "log_uniform"))
        lo, hi = int(declared[large][0]), int(declared[large][1])
        p[large] = _draw_int(rng, max(lo, hi // REACH_SPAN), hi, "non_tile")
        p["value"] = values[(first + i) % len(values)]
        if layouts != [None]:
            p["layout"] = layouts[rng.randrange(len(layouts))]
        p = _shrink_others(p, budget, small, large, rng)
        p["drawn"] = True
        p["reach"] = large
        out.append(p)
    return out


def domain_values(x: torch.Tensor, value: str, g) -> torch.Tensor:
    """The shared value generators (names in protocols.DOMAIN_VALUES), applied to a float tensor whose last
    dimension is a row; anything else is returned as is. The result is a fresh tensor of x's dtype.

    * ``signed_zeros``: a quarter of the entries +0.0 or -0.0 (sign drawn), and the first row all zeros of
      mixed sign when there are two rows or more;
    * ``subnormals``: an eighth of the entries subnormal (magnitude 2**-149..2**-127, sign drawn), the first row
      all positive subnormals when there are two rows or more (its maximum, sum and mean are subnormal);
    * ``outlier_channel``: one column, drawn from the seed, scaled by 10**3..10**4 (the activation outliers of
      large language models);
    * ``dominant_last_tile``: one entry per row 200 above the row's largest; in even rows it sits in the row's
      last tile (past the last multiple of 128), in odd rows anywhere; exp of it overflows float32 unless the
      row's true maximum is subtracted first."""
    if value not in ("signed_zeros", "subnormals", "outlier_channel", "dominant_last_tile"):
        return x
    x64 = x.double().clone()
    rows = x64.reshape(-1, x64.shape[-1]) if x64.dim() else x64.reshape(1, 1)
    R, n = rows.shape
    if n == 0 or R == 0:
        return x
    if value == "signed_zeros":
        mask = torch.rand(rows.shape, generator=g) < 0.25
        sign = torch.where(torch.rand(rows.shape, generator=g) < 0.5, -1.0, 1.0).double()
        rows[mask] = 0.0 * sign[mask]
        if R >= 2:
            rows[0] = 0.0 * sign[0]
    elif value == "subnormals":
        e = torch.randint(-149, -126, rows.shape, generator=g).double()
        sign = torch.where(torch.rand(rows.shape, generator=g) < 0.5, -1.0, 1.0).double()
        sub = sign * torch.ldexp(torch.ones_like(e), e.long())
        mask = torch.rand(rows.shape, generator=g) < 0.125
        rows[mask] = sub[mask]
        if R >= 2:
            rows[0] = sub[0].abs()
    elif value == "outlier_channel":
        col = int(torch.randint(0, n, (1,), generator=g))
        rows[:, col] *= 10.0 ** (3.0 + float(torch.rand((1,), generator=g, dtype=torch.float64)))
    else:
        top = rows.amax(-1)
        tail = n % TAIL_TILE or min(n, TAIL_TILE)
        in_tail = n - tail + torch.randint(0, tail, (R,), generator=g)
        anywhere = torch.randint(0, n, (R,), generator=g)
        pos = torch.where(torch.arange(R) % 2 == 0, in_tail, anywhere)
        rows[torch.arange(R), pos] = top + 200.0
    return rows.reshape(x.shape).to(x.dtype)


def lay_out(x: torch.Tensor, layout: str, g) -> torch.Tensor:
    """The same values as ``x`` (rank >= 1) in a declared layout: ``contiguous``; ``transposed`` (the last two
    dimensions stored column-major); ``padded_rows`` (each row followed by 1..16 elements of other data: row
    stride > row length); ``offset`` (the view starts 1..15 elements into its storage, so its address is off
    every 16/32/64-byte boundary). The bytes around the view are large finite values, so a kernel that reads
    them shows it."""
    if layout in (None, "contiguous") or x.dim() == 0:
        return x
    if layout == "transposed":
        return x.transpose(-1, -2).contiguous().transpose(-1, -2) if x.dim() >= 2 else x
    if layout == "padded_rows":
        pad = 1 + int(torch.randint(0, 16, (1,), generator=g))
        shape = list(x.shape)
        wide = torch.full(shape[:-1] + [shape[-1] + pad], 1.0e30, dtype=x.dtype)
        wide[..., : shape[-1]] = x
        return wide[..., : shape[-1]]
    if layout == "offset":
        off = 1 + int(torch.randint(0, 15, (1,), generator=g))
        flat = torch.full((x.numel() + off,), 1.0e30, dtype=x.dtype)
        flat[off:] = x.reshape(-1)
        return flat[off:].view(x.shape)
    raise ValueError(f"unknown layout {layout!r}")
