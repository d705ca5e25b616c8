"""Declared-property contracts (workers/contracts/specs/declared, docs/contracts.md#declared-property-contracts):
batch invariance of rms_norm / layer_norm / softmax / attention / matmul, exact GELU with in-place calls, cumsum,
top-k ties, causal masks — and the aliasing property the harness checks.

The shipped files' full calibration (`python -m workers.contracts calibrate --declared`) takes minutes on 2 cores;
here every fixture runs through the real sandbox under three explicit seeds on the contract's own protocol, relation
and fixtures, with the sweep cut to its small fixed points and one small drawn point per seed (so the seeds still
choose sizes and rows), which keeps this file near a minute."""

from __future__ import annotations

import copy

import pytest
import torch

from workers.contracts import protocols
from workers.contracts.calibration import naive_check
from workers.contracts.expr import parse
from workers.contracts.harness import aliased_inputs
from workers.contracts.loader import load_declared, load_suite
from workers.contracts.runner import get_contract, run_contract
from workers.contracts.sandbox import SessionPool
from workers.contracts.schema import CLASSES

pytestmark = pytest.mark.slow

SEEDS = [11, 12, 13]
SMALL_ELEMENTS = 2**15  # each fixed point of the test sweep is brought within this many elements
MAX_POINTS = 8  # the first fixed points of the file (the ones around the strategy switches)
SMALL_DRAW = 96  # drawn sizes capped here
KEEP = {"b"}  # the batch of the batch-invariance contracts is what they are about: never shrunk ...
MAX_BATCH = 256  # ... but the top of the declared batch (4096-65536 rows, a Python loop per row in the fixtures) is
# left to the shipped calibration


def _ref(entry):
    return entry if isinstance(entry, str) else entry["impl"]


def _shrunk(point, elements):
    """The point with its largest dimension (never the batch) halved until it holds SMALL_ELEMENTS, or None."""
    p = dict(point)
    for _ in range(64):
        if elements.evaluate({k: float(v) for k, v in p.items() if isinstance(v, int)}) <= SMALL_ELEMENTS:
            return p
        dims = [k for k, v in p.items() if isinstance(v, int) and k not in KEEP and v > 1]
        if not dims:
            return None
        big = max(dims, key=lambda k: p[k])
        p[big] = max(1, p[big] // 2)
    return None


def small(contract):
    """The contract with a test-sized sweep: its first fixed points shrunk to SMALL_ELEMENTS and one drawn point per
    seed with every drawn dimension capped at SMALL_DRAW (the protocol, relation, bound, policies and fixtures are the
    shipped ones)."""
    c = copy.deepcopy(contract)
    sweep = c.data["measurement_protocol"]["sweep"]
    elements = parse(sweep["budget"]["elements"])
    points = [_shrunk(p, elements) for p in sweep["points"] if p.get("b", 1) <= MAX_BATCH]
    points = [p for p in points if p is not None]
    sweep["points"] = points[:MAX_POINTS]
    draw = sweep["draw"]
    draw["count"] = 1
    for spec in draw["dims"].values():
        spec["range"] = [spec["range"][0], max(spec["range"][0], min(spec["range"][1], SMALL_DRAW))]
    return c


DECLARED = {c.id: c for c in load_declared()}


@pytest.fixture(scope="module")
def pool():
    with SessionPool() as p:
        yield p


def test_declared_contracts_load_under_the_twelve_classes_and_stay_out_of_the_default_suite():
    suite = load_suite()
    assert sorted(c.cls for c in suite) == sorted(CLASSES)  # the default suite: each class once
    assert {c.cls for c in DECLARED.values()} <= set(CLASSES)
    assert {c.protocol for c in DECLARED.values()} >= {f"batch_invariance_{op}" for op in protocols.OPS_BATCH}
    for cid, c in DECLARED.items():
        assert get_contract(cid) is not None and get_contract(cid).id == cid  # named by full id
        assert protocols.PROTOCOL_META[c.protocol]["class"] == c.cls
        assert c.data["derivation"]["notes"]  # every declared contract says how its bound was decided
    assert get_contract("C-ORD-03").id == "C-ORD-03/aten.linear/f32.f32->f32.batch_invariant"  # class lookup unchanged


def test_aliased_inputs_from_address_spans():
    inputs = [(1000, 400), (5000, 40)]
    assert aliased_inputs([(inputs, [(2000, 2400)])]) == []
    assert aliased_inputs([(inputs, [(1396, 1400)])]) == [0]  # the last 4 bytes of input 0
    assert aliased_inputs([(inputs, [(1400, 1404)]), (inputs, [(4990, 5001)])]) == [1]
    assert aliased_inputs([("junk", None), (None, [(0, 10)])]) == []


@pytest.mark.parametrize("cid", sorted(DECLARED))
def test_conforming_pass_and_violators_fail_over_several_seeds(cid, pool):
    contract = DECLARED[cid]
    c = small(contract)
    cal = contract.calibration
    for entry in cal["conforming"]:
        v = run_contract(c, _ref(entry), seeds=SEEDS, pool=pool)
        assert v.verdict == "PASS", (cid, _ref(entry), v.reason)
        assert v.measurements >= len(SEEDS)
    for entry in cal["violating"]:
        v = run_contract(c, _ref(entry), seeds=SEEDS, pool=pool)
        kinds = {f["kind"] for f in v.findings if f["severity"] == "fail"}
        assert v.verdict == "FAIL", (cid, _ref(entry), v.reason)
        # a measured, named violation: the protocol's pattern, or the harness's aliasing finding
        assert v.signature.get("pattern") or "output_aliases_input" in kinds, (cid, _ref(entry), v.signature)
        assert naive_check(contract, _ref(entry)), (cid, _ref(entry))  # what benchmarks check does not see it
    for entry in cal["baseline"]:
        assert not naive_check(contract, _ref(entry)), (cid, _ref(entry))


def test_an_output_that_aliases_its_input_is_a_named_failure(pool):
    c = small(DECLARED["C-ORD-01/aten.cumsum/f32->f32"])
    v = run_contract(c, "workers.contracts.impls.declared_violating:inplace_cumsum", seeds=SEEDS[:1], pool=pool)
    assert v.verdict == "FAIL"
    assert "output_aliases_input" in {f["kind"] for f in v.findings}


def test_in_place_calls_of_an_allowed_inplace_contract_are_measured(pool):
    """ALLOWED_INPLACE: the harness hands the kernel one fresh copy of x as both x and out; the conforming kernel
    gives the out-of-place bits, the staged one does not — and neither is an aliasing or mutation finding."""
    c = small(DECLARED["C-CMP-01/gelu/f32->f32.exact_erf"])
    good = run_contract(c, "workers.contracts.impls.declared_reference:gelu", seeds=SEEDS[:1], pool=pool)
    bad = run_contract(c, "workers.contracts.impls.declared_violating:inplace_unsafe_gelu", seeds=SEEDS[:1], pool=pool)
    assert good.verdict == "PASS" and not good.findings
    assert bad.verdict == "FAIL" and bad.signature["pattern"] == "inplace_differs"
    assert bad.signature["inplace_mismatch"] > 0 and bad.signature["e_max"] <= 16
    assert not {f["kind"] for f in bad.findings} & {"input_mutated", "output_aliases_input"}


def test_batch_invariant_references_are_invariant_by_construction_in_process():
    """The fixed-order helpers: a row's bits do not depend on the batch around it (independent of the sandbox)."""
    from workers.contracts.impls import declared_reference as ref

    g = torch.Generator().manual_seed(5)
    x = torch.randn(97, 1031, generator=g) * 3
    full = ref.softmax(x)
    assert all(torch.equal(full[i], ref.softmax(x[i : i + 1].clone())[0]) for i in (0, 1, 50, 96))
    exact = torch.softmax(x.double(), -1)
    assert float(((full.double() - exact).abs() / exact).max()) < 2e-6  # and accurate
