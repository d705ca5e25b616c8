"""Issue #15: sweeps that cover each contract's declared scope (contract files v0.2.0).

* the sweep block is data in the contract file, validated by the loader (unknown dimension, value generator, a
  point outside the declared scope or over the budget are refused with field and line);
* points are drawn per seed: different seeds measure different sizes, the same seed the same ones;
* every size- or value-triggered violator we wrote (workers/contracts/impls/size_triggered.py) is a calibration
  violator of the shipped contract, where test_kc_calibration sees it FAIL at a named point (and the CLI fails one
  here); every correct user-style kernel (tests/contracts/kc_user_kernels.py) PASSES on seed 7, in-process (one
  sandbox per implementation file);
* a verdict records which points were measured (coverage), how many measurements passed, and the failing clause's
  own statistic and bound."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kc_helpers import HERE

from workers.contracts.loader import SPECS_DIR, ContractError, load_text
from workers.contracts.protocols.base import sweep_points

USER = str(HERE / "kc_user_kernels.py")
ST = "workers.contracts.impls.size_triggered:"
PRC01 = (SPECS_DIR / "C-PRC-01.matmul.v0.2.0.yaml").read_text()

# (class, violator that only shows at some sizes or values, the point kind that must catch it)
VIOLATORS = [
    ("C-PRC-01", "k64_tail_dropped_matmul"),
    ("C-PRC-01", "bf16_above_k_matmul"),
    ("C-PRC-02", "bf16_stats_wide_layer_norm"),
    ("C-PRC-03", "ftz_large_mul"),
    ("C-PRC-04", "fp16_long_k_linear"),
    ("C-ORD-01", "fp16_accumulate_long_rows_mean"),
    ("C-ORD-02", "random_order_large_batch_row_sum"),
    ("C-ORD-03", "split_k_above_64_linear"),
    ("C-CMP-01", "eps_outside_sqrt_rms_norm"),
    ("C-CMP-02", "bf16_large_m_autotuned_matmul"),
    ("C-CMP-03", "no_max_subtraction_softmax"),
    ("C-EXC-01", "nan_dropping_wide_row_max"),
    ("C-EXC-02", "clamp_many_indices_gather"),
    # issue #24: caught only by scope-reaching draws, the declared value domain or the declared layouts
    ("C-PRC-01", "m_remainder_bf16_matmul"),
    ("C-ORD-03", "remainder_bf16_linear"),
    ("C-CMP-03", "tail_max_skipped_softmax"),
    ("C-CMP-03", "row_stride_assumed_softmax"),
    ("C-CMP-03", "storage_offset_ignored_softmax"),
    ("C-EXC-01", "tail_tile_dropped_row_max"),
    ("C-EXC-01", "daz_row_max"),
]
USER_KERNELS = [
    ("C-PRC-01", "blocked_matmul"),
    ("C-PRC-02", "welford_layer_norm"),
    ("C-PRC-03", "plain_mul"),
    ("C-PRC-04", "blocked_matmul"),
    ("C-ORD-01", "kahan_row_mean"),
    ("C-ORD-02", "tree_row_sum"),
    ("C-ORD-03", "rowwise_linear"),
    ("C-CMP-01", "two_step_rms_norm"),
    ("C-CMP-02", "blocked_matmul"),
    ("C-CMP-03", "online_softmax"),
    ("C-EXC-01", "tree_row_max"),
    ("C-EXC-02", "checked_gather"),
]


def _mutate(old, new, text=PRC01):
    assert old in text, old
    return text.replace(old, new)


def test_every_shipped_contract_has_a_sweep_with_a_budget(shipped):
    assert len(shipped) == 12
    for cls, c in shipped.items():
        sweep = c.protocol_params.get("sweep")
        assert sweep and sweep["budget"]["max_elements"], cls
        # 0.4.0: scope-reaching draws (issue #24; C-PRC-03's budget already caps n far below its declared 2**31, so
        # its 0.4.0 adds subnormal products at the last positions instead)
        assert c.version == "0.4.0", cls


@pytest.mark.parametrize(
    "old,new,field,message",
    [
        (
            "      - {M: 32, K: 2949, N: 32}",
            "      - {M: 32, K: 2949, N: 32, Z: 3}",
            "measurement_protocol.sweep.points[4].Z",
            "unknown dimension 'Z'",
        ),
        (
            "      - {M: 32, K: 2949, N: 32}",
            "      - {M: 32, K: 131072, N: 32}",
            "measurement_protocol.sweep.points[4].K",
            "outside the declared scope",
        ),
        (
            "      - {M: 32, K: 2949, N: 32}",
            "      - {M: 2048, K: 2048, N: 2048}",
            "measurement_protocol.sweep.points[4]",
            "exceeds the budget",
        ),
        (
            "      values: [gauss]",
            "      values: [huge_logits]",
            "measurement_protocol.sweep.draw.values[0]",
            "value generator 'huge_logits'",
        ),
        (
            "        K: {range: [2, 65536], kind: non_tile}",
            "        K: {range: [9, 2], kind: non_tile}",
            "measurement_protocol.sweep.draw.dims.K.range",
            "low <= high",
        ),
        (
            "        K: {range: [2, 65536], kind: non_tile}",
            "        K: {range: [2, 65536], kind: odd}",
            "measurement_protocol.sweep.draw.dims.K.kind",
            "is not one of",
        ),
    ],
)
def test_loader_refuses_a_bad_sweep_naming_field_and_line(old, new, field, message):
    text = _mutate(old, new)
    with pytest.raises(ContractError) as ei:
        load_text(text, "prc01.yaml")
    assert ei.value.field == field and message in ei.value.message
    line = (
        next(i for i, ln in enumerate(text.splitlines(), 1) if new.strip().split(":")[0] in ln and new.strip() in ln)
        if new.strip() in text
        else None
    )
    assert ei.value.line is not None and (line is None or abs(ei.value.line - line) <= 1)


def test_drawn_points_depend_on_the_seed_stay_in_range_and_budget(shipped):
    c = shipped["C-PRC-01"]
    d = {"M": 32, "K": 64, "N": 32, "value": "gauss"}
    a, b, a2 = sweep_points(c, 7, d), sweep_points(c, 123456789, d), sweep_points(c, 7, d)
    assert a == a2
    drawn_a = [p for p in a if p.get("drawn") and not p.get("reach")]
    drawn_b = [p for p in b if p.get("drawn") and not p.get("reach")]
    assert len(drawn_a) == 3 and drawn_a != drawn_b
    for p in drawn_a + drawn_b:
        assert 1 <= p["M"] <= 512 and 2 <= p["K"] <= 65536 and p["K"] % 8 and 1 <= p["N"] <= 512
        assert p["M"] * p["K"] * p["N"] <= 2**26
    fixed = [p for p in a if not p.get("drawn")]
    assert {p["K"] for p in fixed} >= {1, 2949, 65536} and max(p["M"] for p in fixed) == 65536


def test_many_seeds_draw_off_tile_and_prime_sizes(shipped):
    ks = {
        p["K"]
        for s in range(40)
        for p in sweep_points(shipped["C-PRC-01"], s, {"M": 1, "K": 1, "N": 1, "value": "gauss"})
        if p.get("drawn")
    }
    assert len(ks) > 60 and all(k % 8 for k in ks) and max(ks) > 8192


def test_v010_contracts_still_use_their_sweeps_lists():
    old = load_text((SPECS_DIR / "C-PRC-01.matmul.v0.1.0.yaml").read_text())
    pts = sweep_points(old, 7, {"M": 32, "K": 64, "N": 32, "value": "gauss"})
    assert sorted(p["K"] for p in pts) == [64, 256, 1024, 4096]


@pytest.fixture(scope="module")
def pool():
    from workers.contracts.sandbox import SessionPool

    with SessionPool() as p:
        yield p


@pytest.mark.parametrize("cls,name", VIOLATORS, ids=[f"{c}-{n}" for c, n in VIOLATORS])
def test_size_and_value_triggered_violators_are_calibration_violators(cls, name, shipped):
    """Each violator is run where it is judged: the shipped contract's calibration (test_kc_calibration checks that
    it passes the naive allclose check, FAILS, and names the clause and point that caught it). Running it here again
    would measure the same thing twice."""
    listed = [e if isinstance(e, str) else e["impl"] for e in shipped[cls].calibration.get("violating") or []]
    assert ST + name in listed, f"{name} is not a calibration violator of the shipped {cls}"


@pytest.mark.parametrize("cls,name", USER_KERNELS, ids=[f"{c}-{n}" for c, n in USER_KERNELS])
def test_correct_user_style_kernels_pass(cls, name, pool, shipped):
    from workers.contracts.runner import run_contract

    v = run_contract(shipped[cls], f"{USER}:{name}", seeds=[7], pool=pool)
    assert v.verdict == "PASS", (v.verdict, v.reason)
    assert v.passed_measurements == v.measurements > 0
    cov = v.coverage
    assert cov["points"] >= len(shipped[cls].protocol_params["sweep"]["points"]) and cov["drawn_points"] >= 1
    assert cov["device"] == "cpu" and "float32" in cov["dtypes"] and cov["text"]
    # issue #24: the declared layouts and the value domain's generators are drawn, and the verdict says so
    if cls == "C-CMP-03":
        assert {"padded_rows", "offset", "transposed"} <= set(cov["layouts"]) and "dominant_last_tile" in cov["values"]
    if cls == "C-EXC-01":
        assert {"dominant_last_tile", "subnormals", "signed_zeros"} <= set(cov["values"])


def test_cli_check_fails_the_k64_tail_bug_and_names_the_point():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "workers.contracts",
            "check",
            "--contract",
            "C-PRC-01",
            "--impl",
            ST + "k64_tail_dropped_matmul",
            "--seeds",
            "7",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 1, out.stderr[-2000:]
    d = json.loads(out.stdout)
    assert d["verdict"] == "FAIL" and d["contract_version"] == "0.4.0"
    assert d["failing_clause"]["statistic_name"] == "rho" and d["failing_clause"]["point"]["K"] % 64
    assert d["statistic"] > d["bound"] and d["coverage"]["dims"]["K"]["max"] == 65536


def test_failing_secondary_clause_reports_its_own_statistic(pool, shipped):
    """A probe-only violation: rho within its bound everywhere, probe_mismatch > 0. The verdict must show
    probe_mismatch and its bound, not rho = 0 / margin 0."""
    from workers.contracts.runner import run_contract

    v = run_contract(
        shipped["C-PRC-01"], f"{HERE / 'kc_sweep_fixtures.py'}:probe_breaking_matmul", seeds=[7], pool=pool
    )
    assert v.verdict == "FAIL", v.reason
    assert v.statistic_name == "probe_mismatch" and v.statistic > 0 and v.bound == 0
    assert v.failing_clause["clause"] == "probe_mismatch == 0"


def test_open_track_grades_against_the_declared_precision(pool, shipped):
    """bf16 operands above K = 8192 fail the closed track; declared as bf16 (u = 2**-8) the same kernel is graded
    against its declaration on the open track, and the grade says so."""
    from workers.contracts.grading import grade
    from workers.contracts.runner import run_contract

    c = shipped["C-PRC-01"]
    closed = run_contract(c, ST + "bf16_above_k_matmul", seeds=[7], pool=pool)
    opened = run_contract(c, ST + "bf16_above_k_matmul", seeds=[7], pool=pool, declared_unit_roundoff="2**-8")
    assert closed.verdict == "FAIL" and closed.track == "closed"
    assert opened.verdict == "PASS" and opened.track == "open" and opened.declaration["unit_roundoff"] == 2**-8
    assert opened.bound == pytest.approx(closed.bound * 2**16, rel=1e-12) or opened.bound > closed.bound
    g_closed, g_open = grade([closed]), grade([opened])
    assert g_closed["track"] == "closed" and "open track" not in g_closed["summary"]
    assert g_open["track"] == "open" and "open track" in g_open["summary"]
    row = g_closed["contracts"][0]
    assert row["passed"] < row["measured"] and row["clause"] == "rho <= bound" and row["coverage"]
    with pytest.raises(ValueError, match="lower precision"):
        run_contract(c, ST + "bf16_above_k_matmul", seeds=[7], pool=pool, declared_unit_roundoff="2**-30")
