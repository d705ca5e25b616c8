"""Issue #24, hold-out check: kernels written after the contracts and never listed in their calibration
(tests/contracts/kc_holdout_kernels.py) — realistic bugs across the classes, gaming kernels, correct controls —
go through the real harness (run_contract, the sandbox, public seed 7). Each bug and each gaming kernel must FAIL,
at the clause or harness finding that names what it did wrong; each control must PASS.

Two of the gaming kernels passed before the fix this module came with: one honest only on inputs at storage
offset 0 (every launch of a case used to run on the first allocation, and only the first launch was measured), one
that hands back a view of a workspace it overwrites on the next call. See docs/contracts.md, Hold-out kernels.

One sandbox for the file (module-scoped pool); the bugs whose catch depends on what a hidden seed draws are also
run in this process over fresh hidden seeds (kc_catch), cheaply."""

from __future__ import annotations

import os
import shutil

import pytest

from kc_catch import seed_caught
from kc_helpers import HERE

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("kc_holdout"), pytest.mark.timeout(900)]

KERNELS = HERE / "kc_holdout_kernels.py"

# (class, kernel, the statistic of the failing clause or the harness finding that must name it)
BUGS = [
    ("C-PRC-01", "split_k4_remainder_dropped_matmul", "rho|probe_mismatch"),
    ("C-PRC-02", "one_pass_variance_layer_norm", "err"),
    ("C-PRC-03", "tail_ftz_mul", "mismatch"),
    ("C-PRC-04", "absmax_fp16_staged_linear", "rho"),
    ("C-ORD-01", "fp16_count_row_mean", "e"),
    ("C-ORD-02", "atomic_long_rows_row_sum", "distinct_extra"),
    ("C-ORD-03", "small_batch_split_k_linear", "mismatch_rows"),
    ("C-CMP-01", "eps_on_sum_rms_norm", "rel_err"),
    ("C-CMP-01", "accumulating_rms_norm", "destination_unwritten"),
    ("C-CMP-02", "wide_tile_tail_dropped_matmul", "rho"),
    ("C-CMP-03", "zero_padded_tail_softmax", "err"),
    ("C-CMP-03", "first_block_max_softmax", "err"),
    ("C-EXC-01", "lowest_finite_init_row_max", "mismatch"),
    ("C-EXC-01", "zero_init_row_max", "mismatch"),
    ("C-EXC-02", "negative_wraps_gather", "raise_deficit"),
]
GAMING = [
    ("C-PRC-01", "first_call_honest_matmul", "rho|probe_mismatch"),
    ("C-PRC-01", "offset_zero_honest_matmul", "rho|probe_mismatch"),
    ("C-CMP-01", "uniform_fill_honest_rms_norm", "rel_err"),
    ("C-CMP-03", "static_workspace_softmax", "output_reused"),
    ("C-PRC-01", "poison_probe_matmul", "rho|probe_mismatch"),
    ("C-PRC-01", "process_shape_honest_matmul", "rho|probe_mismatch"),
    ("C-PRC-01", "inference_mode_bf16_matmul", "rho|probe_mismatch"),
]
CONTROLS = [
    ("C-PRC-02", "tree_chan_layer_norm"),
    ("C-CMP-03", "exp2_online_softmax"),
    ("C-PRC-01", "tiled_matmul"),
    ("C-CMP-02", "tiled_matmul"),
    ("C-CMP-03", "cached_workspace_softmax"),
]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    # submitted under a name that says nothing about tests, hold-outs or harnesses
    path = tmp_path_factory.mktemp("user") / "kernels.py"
    shutil.copyfile(KERNELS, path)
    return str(path)


@pytest.fixture(scope="module")
def pool():
    from workers.contracts.sandbox import SessionPool

    with SessionPool() as p:
        yield p


def _named(v, what: str) -> bool:
    """The verdict names one of ``what`` ("a|b"): the failing clause's statistic, or a failing harness finding of
    that kind (C-PRC-01's probe and rho clauses both catch a wrong product; which is reported first is the order of
    the contract's clauses)."""
    kinds = {f["kind"] for f in v.findings if f["severity"] == "fail"}
    clause = ((v.failing_clause or {}).get("clause") or "").split()
    return any(w in kinds or v.statistic_name == w or w in clause for w in what.split("|"))


@pytest.mark.parametrize("cls,name,what", BUGS + GAMING, ids=[f"{c}-{n}" for c, n, _ in BUGS + GAMING])
def test_holdout_bug_or_gaming_kernel_fails_at_a_named_clause(cls, name, what, kernels, pool, shipped):
    from workers.contracts.runner import run_contract

    v = run_contract(shipped[cls], f"{kernels}:{name}", seeds=[7], pool=pool)
    assert v.verdict == "FAIL", (v.verdict, v.reason)
    assert _named(v, what), (what, v.statistic_name, v.failing_clause, [f["kind"] for f in v.findings])


@pytest.mark.parametrize("cls,name", CONTROLS, ids=[f"{c}-{n}" for c, n in CONTROLS])
def test_holdout_control_passes(cls, name, kernels, pool, shipped):
    from workers.contracts.runner import run_contract

    v = run_contract(shipped[cls], f"{kernels}:{name}", seeds=[7], pool=pool)
    assert v.verdict == "PASS", (v.verdict, v.reason)
    assert v.passed_measurements == v.measurements > 0


# the bugs that only some points or values show: each must be caught on every fresh hidden seed, not on seed 7 only.
# tail_ftz_mul (C-PRC-03) was caught on only 38 of 50 fresh seeds by v0.2.0, whose subnormal products sit at random
# positions; v0.4.0 also puts them in the last 32 positions, where a vector loop's scalar tail is.
SEED_DEPENDENT = [
    ("C-ORD-02", "atomic_long_rows_row_sum"),
    ("C-EXC-01", "lowest_finite_init_row_max"),
    ("C-CMP-03", "first_block_max_softmax"),
    ("C-PRC-03", "tail_ftz_mul"),
]


@pytest.mark.parametrize("cls,name", SEED_DEPENDENT, ids=[f"{c}-{n}" for c, n in SEED_DEPENDENT])
def test_seed_dependent_holdout_bugs_are_caught_on_fresh_hidden_seeds(cls, name, shipped):
    from workers.contracts.staging import load_impl

    n = 50 if os.environ.get("KC_CATCH_RATE_WIDE") == "1" else 3
    seeds = [int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF for _ in range(n)]
    fn = load_impl(f"{KERNELS}:{name}")
    misses = [s for s in seeds if not seed_caught(shipped[cls], fn, s)]
    assert not misses, f"{cls} {name}: missed on seeds {misses} ({n - len(misses)}/{n} caught)"
