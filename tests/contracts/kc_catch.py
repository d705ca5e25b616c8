"""Catch rate of a violating implementation over many hidden seeds (issue #24), measured without the sandbox.

What a seed changes is the data: the points drawn from it (sizes, value generators, layouts) and the values at
every point. Whether a size- or value-triggered bug is caught therefore depends on the protocol's cases and
measurements, not on the process the kernel runs in (the sandbox's own checks are tested in test_kc_gaming.py and
test_kc_containment.py). This module builds a seed's cases with the contract's protocol, calls our own (trusted)
implementation in this process the way the child does (fresh NaN-filled destination per launch, ``repeat``
launches, every config forced where the case asks), and evaluates the contract's relation on the protocol's
measurements: a seed is caught when at least one measurement violates the relation or a case raised where no
raise was expected."""

from __future__ import annotations

import hashlib

import torch


from workers.contracts.protocols import get as get_protocol
from workers.contracts.protocols.base import Out


def _hash(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _launch(fn, case, extra):
    args = [torch.full(a.shape, float("nan"), dtype=a.dtype) if isinstance(a, Out) else a for a in case.args]
    ret = fn(*args, **case.kwargs, **extra)
    out = args[case.out_index] if case.out_index is not None else ret
    return out.detach().clone()


def _series(fn, case, extra):
    outs = [_launch(fn, case, extra) for _ in range(max(1, case.repeat))]
    return {"config": extra.get("config") or "auto", "outputs": outs, "hashes": [_hash(o) for o in outs]}


def _result(fn, case) -> dict:
    r = {"key": case.key, "outputs": [], "hashes": [], "configs": None, "exception": None, "bad_output": None}
    r.update(input_mutated=False, input_hash=None, unwritten_mask=None, unwritten=0, times=[])
    try:
        if case.all_configs:
            configs = [_series(fn, case, {})] + [_series(fn, case, {"config": c}) for c in getattr(fn, "configs", [])]
            r["configs"] = configs
            first = configs[0]
        else:
            first = _series(fn, case, {})
    except Exception as exc:  # noqa: BLE001 - an OOB probe raises by contract; anything else is a finding below
        r["exception"] = f"{type(exc).__name__}: {exc}"
        return r
    r["outputs"], r["hashes"] = first["outputs"], first["hashes"]
    return r


def seed_chosen(contract):
    """The contract with only what a seed chooses: the drawn points (ordinary and scope-reaching) and the fixed
    points that name a value generator or layout of their own (their values are drawn from the seed). The other
    fixed points measure the same sizes under every seed; they are tested on the public seed elsewhere."""
    import copy

    c = copy.copy(contract)
    c.data = copy.deepcopy(contract.data)
    sweep = c.data["measurement_protocol"]["sweep"]
    sweep["points"] = [p for p in sweep.get("points") or [] if "value" in p or "layout" in p]
    return c


def seed_caught(contract, fn, seed: int) -> bool:
    """Whether the contract, measured under this one seed, fails ``fn``: a relation violated at some measured
    point, or a case that raised without being an expected raise."""
    proto = get_protocol(contract.protocol)
    cases = {c.key: c for c in proto.cases(contract, [(int(seed), "hidden")])}
    results = {k: _result(fn, c) for k, c in cases.items()}
    if any(r["exception"] and not cases[k].expect_raise for k, r in results.items()):
        return True
    for m in proto.measure(contract, cases, results):
        names = dict(m["names"])
        names["bound"] = float(contract.bound.evaluate(names))
        if not contract.relation.holds(names):
            return True
    return False
