"""Harness invariants (docs/contract-language.md#harness-invariants) exercised by hostile implementations, each with
the verdict it must get (docs/contract-language.md#the-twelve-classes: CRASH, TIMEOUT or FAIL with a reason, never a
traceback in place of a verdict)."""

import json

import pytest
import torch

from kc_helpers import REF, VIOL, hostile, processes_with
from workers.contracts import load_text, run_contract, run_suite
from workers.contracts.harness import HIDDEN_KEY_ENV, seed_plan
from workers.contracts.protocols.base import ftz_enabled

PUBLIC = [7]


def _kinds(v):
    return {f["kind"] for f in v.findings}


def test_never_writes_its_output_fails_on_poisoned_memory():
    v = run_contract("C-CMP-01", hostile("gather_never_writes_dps"), seeds=PUBLIC)
    assert v.verdict == "FAIL"
    assert v.signature["sentinel_survival"] == 1.0
    assert v.signature["order_mismatch"] > 0  # it "passes" only when the reference ran first
    # the destination's fill pattern differs per launch, so the untouched buffer is seen by the parent directly
    assert "destination_unwritten" in _kinds(v)


def test_mutating_an_input_fails_with_the_immutability_hash():
    v = run_contract("C-PRC-01", hostile("matmul_zero_out_input"), seeds=PUBLIC)
    assert v.verdict == "FAIL"
    assert "input_mutated" in _kinds(v)
    assert "input" in v.reason


def test_cached_result_fails_input_sensitivity():
    v = run_contract("C-EXC-02", hostile("gather_cached"), seeds=PUBLIC)
    assert v.verdict == "FAIL"
    assert "input_insensitive" in _kinds(v)


def test_hang_is_a_timeout():
    v = run_contract("C-EXC-02", hostile("gather_hangs"), seeds=PUBLIC, time_limit_s=3)
    assert v.verdict == "TIMEOUT"
    assert "3 s" in v.reason
    assert v.duration_s < 100  # the kernel sleeps 600 s; startup of the forkserver may add a few seconds


def test_raise_is_a_crash_with_the_message_not_a_traceback():
    v = run_contract("C-EXC-02", hostile("gather_raises"), seeds=PUBLIC)
    assert v.verdict == "CRASH"
    assert "RuntimeError" in v.reason and "invalid configuration argument" in v.reason
    assert "Traceback" not in v.reason


@pytest.mark.parametrize(
    "fn,verdict,fragment",
    [
        ("gather_wrong_shape", "FAIL", "shape (1000, 7), expected (1000, 8)"),
        ("gather_wrong_dtype", "FAIL", "dtype float64, expected float32"),
        ("gather_not_a_tensor", "FAIL", "returned list"),
        ("gather_dies", "CRASH", "exited with code 3"),
        ("gather_runaway_output", "FAIL", "shape (4096, 4096), expected (1000, 8)"),
    ],
)
def test_bad_outputs_and_dying_processes(fn, verdict, fragment):
    v = run_contract("C-EXC-02", hostile(fn), seeds=PUBLIC)
    assert v.verdict == verdict
    assert fragment in v.reason


def test_memory_limit():
    v = run_contract("C-EXC-02", hostile("gather_memory_hog"), seeds=PUBLIC, memory_limit_mb=512)
    assert v.verdict == "CRASH"
    assert "MemoryError" in v.reason


def test_import_failure_of_an_uploaded_module_is_a_crash(tmp_path):
    from kc_helpers import HERE

    v = run_contract("C-EXC-02", f"{HERE / 'kc_broken_module.py'}:gather_rows", seeds=PUBLIC)
    assert v.verdict == "CRASH" and "could not load implementation" in v.reason and "ImportError" in v.reason
    v = run_contract("C-EXC-02", f"{tmp_path / 'missing.py'}:gather_rows", seeds=PUBLIC)
    assert v.verdict == "CRASH" and "does not exist" in v.reason


def test_candidate_global_state_stays_in_the_child():
    assert not ftz_enabled()
    v = run_contract("C-PRC-03", hostile("mul_leaves_ftz_on"), seeds=PUBLIC)
    assert v.verdict == "FAIL"
    assert v.signature["pattern"] in ("outputs_flushed", "inputs_flushed")
    assert v.environment["flags_after"]["ftz_daz"] is True  # recorded...
    assert not ftz_enabled()  # ...but the oracle's process never flushed


def test_environment_flags_reach_the_child_kc_a():
    """The deployment flag FTZ on makes even the conforming mul fail PRESERVE (KC-A below KC-C)."""
    ok = run_contract("C-PRC-03", REF + "mul", seeds=PUBLIC)
    bad = run_contract("C-PRC-03", REF + "mul", seeds=PUBLIC, flags={"flush_denormal": True})
    assert ok.verdict == "PASS" and bad.verdict == "FAIL"
    assert ok.environment["flags"]["ftz_daz"] is False and bad.environment["flags"]["ftz_daz"] is True


def test_replay_disagreement_fails_a_bitwise_contract():
    v = run_contract("C-ORD-02", hostile("row_sum_nondeterministic"), seeds=PUBLIC)
    assert v.verdict == "FAIL"
    assert "replay_mismatch" in _kinds(v) and v.signature["distinct_outputs"] > 1


def test_hidden_seeds_catch_public_seed_overfitting(monkeypatch):
    from workers.contracts.loader import SPECS_DIR, load_file

    # v0.1.0: one fixed shape per seed, so the fixture can rebuild the public seed's data (v0.2.0 also draws sizes
    # per seed, which this fixture does not attempt)
    exc02 = load_file(SPECS_DIR / "C-EXC-02.gather_rows.v0.1.0.yaml")
    impl = hostile("gather_overfits_public_seed")
    assert run_contract(exc02, impl, seeds=PUBLIC).verdict == "PASS"
    monkeypatch.setenv(HIDDEN_KEY_ENV, "grader-secret")
    v = run_contract(exc02, impl)  # public + hidden seeds
    assert v.verdict == "FAIL"
    failing = [t for t in v.trace if t["verdict"] == "FAIL"]
    assert failing and all(t["seed_class"] == "hidden" for t in failing)
    assert all(t["seed"] is None for t in failing)  # hidden seeds are not disclosed in the trace
    assert v.assurance_level == 3


def test_seed_plan_hidden_seeds_keyed_and_unkeyed(shipped, monkeypatch):
    c = shipped["C-PRC-01"]
    monkeypatch.setenv(HIDDEN_KEY_ENV, "k1")
    a, b = seed_plan(c), seed_plan(c)
    assert a == b and [s for s, k in a if k == "public"] == [7]
    monkeypatch.setenv(HIDDEN_KEY_ENV, "k2")
    assert seed_plan(c) != a
    monkeypatch.delenv(HIDDEN_KEY_ENV)
    hidden = [s for s, k in seed_plan(c) if k == "hidden"]
    assert len(hidden) == c.protocol_params["seeds"]["hidden_count"]
    assert seed_plan(c, seeds=[1, 2]) == [(1, "explicit"), (2, "explicit")]


def test_trace_fingerprint_and_json(tmp_path):
    path = tmp_path / "trace.jsonl"
    v = run_contract("C-EXC-02", REF + "gather_rows", seeds=[7, 8], trace_path=path)
    assert v.verdict == "PASS" and v.margin == 0.0
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == v.measurements >= 2  # one per (seed, sweep point)
    for r in records:
        for key in (
            "contract_id",
            "contract_version",
            "impl_id",
            "impl_hash",
            "platform",
            "seed_class",
            "input_hash",
            "sweep_point",
            "statistic",
            "bound",
            "margin",
            "verdict",
            "timestamp",
            "suite_version",
        ):
            assert key in r
        assert r["platform"]["torch"] == torch.__version__
    flags = v.environment["flags"]
    for key in ("allow_tf32_matmul", "ftz_daz", "deterministic_algorithms", "CUBLAS_WORKSPACE_CONFIG"):
        assert key in flags
    isolation = v.environment["isolation"]
    assert isolation["mode"] == "bubblewrap" and isolation["network"] == "none"
    assert {"pid", "net", "ipc", "mount"} <= set(isolation["namespaces"]) and isolation["sandbox_uid"] != 0
    assert len(v.impl_hash) == 64
    json.dumps(v.to_dict(), allow_nan=False)


def test_infinite_statistic_serialises_as_null():
    v = run_contract("C-EXC-02", VIOL + "zero_fill_gather", seeds=PUBLIC)
    assert v.verdict == "FAIL" and v.margin == float("inf")
    d = json.loads(json.dumps(v.to_dict(), allow_nan=False))
    assert d["margin"] is None and d["statistic"] == 8.0


def test_callables_are_accepted_if_picklable():
    from workers.contracts.impls import reference

    assert run_contract("C-EXC-02", reference.gather_rows, seeds=PUBLIC).verdict == "PASS"
    with pytest.raises(TypeError, match="module-level function"):
        run_contract("C-EXC-02", lambda d, i: d[i], seeds=PUBLIC)


def test_not_declared_when_the_policy_field_is_missing(shipped):
    text = shipped["C-EXC-02"].source_text.replace("policies: {oob: RAISE, negative_index: ERROR}\n", "")
    c = load_text(text)
    v = run_contract(c, REF + "gather_rows", seeds=PUBLIC)
    assert v.verdict == "NOT_DECLARED" and "policies.oob" in v.reason


def test_not_applicable_and_unavailable_device(shipped):
    assert run_contract("C-EXC-02", None).verdict == "NOT_APPLICABLE"
    text = shipped["C-EXC-02"].source_text.replace("  platforms: [any]", "  platforms: [cuda]")
    assert run_contract(load_text(text), REF + "gather_rows").verdict == "NOT_APPLICABLE"
    if not torch.cuda.is_available():
        v = run_contract("C-EXC-02", REF + "gather_rows", device="cuda")
        assert v.verdict == "INCONCLUSIVE" and "CUDA" in v.reason


def test_unknown_contract_id():
    with pytest.raises(KeyError, match="unknown contract id"):
        run_contract("C-XYZ-99", REF + "gather_rows")


def test_run_suite_reports_progress_and_maps_functions_by_signature():
    seen = []
    vs = run_suite(
        "workers.contracts.impls.reference",
        contracts=["C-EXC-01", "C-EXC-02"],
        seeds=PUBLIC,
        progress=lambda f, m: seen.append((f, m)),
    )
    assert [v.verdict for v in vs] == ["PASS", "PASS"]
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    assert any("case" in m for _, m in seen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_path_runs_the_same_contracts():
    for cls, impl in (("C-EXC-02", "gather_rows"), ("C-CMP-01", "rms_norm"), ("C-EXC-01", "row_max")):
        v = run_contract(cls, REF + impl, device="cuda", seeds=PUBLIC)
        assert v.verdict == "PASS", v.reason
        assert v.environment["device"] == "cuda" and "cuda" in v.environment
    v = run_contract("C-CMP-01", VIOL + "no_write_rms_norm", device="cuda", seeds=PUBLIC)
    assert v.verdict == "FAIL" and v.signature["sentinel_survival"] == 1.0


def test_replay_reproduces_a_recorded_verdict(monkeypatch):
    from workers.contracts.runner import replay

    monkeypatch.setenv(HIDDEN_KEY_ENV, "replay-key")
    v = run_contract("C-PRC-03", REF + "mul", flags={"flush_denormal": True})
    again = replay(json.loads(json.dumps(v.to_dict())))
    assert again.verdict == v.verdict == "FAIL"
    assert again.environment["requested_flags"]["flush_denormal"] is True
    assert [t["input_hash"] for t in again.trace] == [t["input_hash"] for t in v.trace]
    monkeypatch.delenv(HIDDEN_KEY_ENV)
    with pytest.raises(ValueError, match="KC_HIDDEN_SEED_KEY"):
        replay(v)


def test_timeout_kills_processes_the_kernel_started():
    """The helper's command line carries a marker; after the timeout no process on this machine has it."""
    import time

    v = run_contract("C-EXC-02", hostile("gather_hangs_with_a_helper"), seeds=PUBLIC, time_limit_s=4)
    assert v.verdict == "TIMEOUT"
    for _ in range(300):
        if not processes_with("kc-hostile-helper"):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"helper processes survived the timeout: {processes_with('kc-hostile-helper')}")
