"""Three-state calibration of the whole suite (the grader is itself graded), and the three incidents."""

import json

import pytest

from workers.contracts import calibrate_all, run_incidents
from workers.contracts.schema import CLASSES

# The whole calibration runs in the first test's fixture: with the v0.4.0 sweeps (points near the top of every
# declared dimension) and issue #24's seven extra violators it takes about 1.5x what it did, which on the shared
# 2-core machine can pass the suite's default 300 s per test; each sandbox run keeps its own time limit.
# One xdist worker runs the whole module: split across two, each would build the module fixture (a full calibration).
pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("kc_calibration")]


@pytest.fixture(scope="module")
def report():
    return calibrate_all()


def test_all_twelve_calibrated(report):
    assert report["ok"], report["problems"]
    assert sorted(r["class"] for r in report["contracts"]) == sorted(CLASSES)
    # stored as it is by the portal (PostgreSQL's JSON has no Infinity or NaN): a violator whose failing clause
    # measured an infinite error once failed the whole calibration job with a DataError
    json.dumps(report, allow_nan=False)


def test_each_state_behaves_as_its_name_says(report):
    for r in report["contracts"]:
        st = r["states"]
        assert st["conforming"] and st["violating"] and st["baseline"], r["class"]
        for row in st["conforming"]:
            assert row["verdict"] == "PASS" and row["naive_pass"], (r["class"], row)
            assert row["margin"] is not None and row["margin"] <= 0.5
        for row in st["violating"]:
            if row.get("platform_dependent"):
                continue
            # passes what today's benchmarks check, fails the contract
            assert row["naive_pass"] and row["verdict"] == "FAIL", (r["class"], row)
            assert row["pattern"] is not None, (r["class"], row)  # a measured, named violation signature
        for row in st["baseline"]:
            assert not row["naive_pass"] and row["verdict"] not in ("PASS", "QUALITY_WARNING"), (r["class"], row)


def test_size_and_value_triggered_violators_fail_at_a_named_point(report):
    """The violators that show only at some sizes, values or layouts (impls/size_triggered.py, catalogued in
    test_kc_sweeps.VIOLATORS) are caught on the shipped contract by a measurement: the verdict names the failing
    clause and the point it failed at, and some measurements passed (the bug is not everywhere)."""
    rows = [
        (r["class"], row)
        for r in report["contracts"]
        for row in r["states"]["violating"]
        if row["impl"].startswith("workers.contracts.impls.size_triggered:")
    ]
    assert len(rows) >= 20
    for cls, row in rows:
        assert row["verdict"] == "FAIL" and row["naive_pass"], (cls, row)
        assert row["passed_measurements"] < row["measurements"], (cls, row)
        assert row["failing_clause"].get("clause") and row["failing_clause"].get("point"), (cls, row)


def test_violators_fail_by_a_wide_margin_where_the_bound_is_not_zero(report):
    for r in report["contracts"]:
        for row in r["states"]["violating"]:
            if row["bound"] and row["margin"] is not None and not row.get("platform_dependent"):
                assert row["margin"] > 10, (r["class"], row)


def test_incidents_reproduced():
    rep = run_incidents()
    by = {i["name"]: i for i in rep["incidents"]}
    assert rep["all_reproduced"], rep
    assert by["ascend_silent_precision_coercion"]["class"] == "C-PRC-01"
    assert by["sakana_reward_hacked_kernel"]["class"] == "C-CMP-01"
    assert by["amd_oob_silent_acceptance"]["class"] == "C-EXC-02"
    hf32 = by["ascend_silent_precision_coercion"]["measured"]["hf32_matmul"]["rho_max_by_K"]
    # flat in K (operand coercion, not accumulation: that grows 10-100x over this range). v0.2.0 also measures
    # small and drawn shapes whose maximum runs over fewer entries, so the spread is wider than at fixed M = N = 32
    vals = [v for k, v in hf32.items() if int(k) >= 64]
    assert len(vals) >= 4 and max(vals) / min(vals) < 3
    assert (
        by["amd_oob_silent_acceptance"]["measured"]["index_width_example"]["int32_offset_of_row_69999"]
        == (69999 * 40000 + 2**31) % 2**32 - 2**31
    )
