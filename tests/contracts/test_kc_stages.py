"""run_contract as seven named stages (workers/contracts/runner.py, STAGES), each run here alone, without a sandbox."""

import pytest

from workers.contracts.runner import (
    STAGES,
    RunState,
    Stop,
    stage_decide,
    stage_findings,
    stage_plan,
    stage_resolve,
    stage_screen,
)

REF = "workers.contracts.impls.reference:"


def _state(contract="C-ORD-02", impl=REF + "row_sum", **kw):
    st = RunState(contract, impl, seeds=[7], **kw)
    stage_resolve(st)
    return st


def test_the_seven_stages_in_order():
    assert [s.__name__ for s in STAGES] == [
        "stage_resolve",
        "stage_screen",
        "stage_plan",
        "stage_launch",
        "stage_findings",
        "stage_measure",
        "stage_decide",
    ]


def test_resolve_scales_bounds_on_the_open_track():
    st = _state("C-PRC-01", REF + "matmul", declared_unit_roundoff="2**-8")
    assert st.base["track"] == "open" and st.scale == pytest.approx(2**-8 / st.contract.unit_roundoff)
    with pytest.raises(ValueError):
        _state("C-PRC-01", REF + "matmul", declared_unit_roundoff="2**-40")


@pytest.mark.parametrize("impl,device,verdict", [(None, "cpu", "NOT_APPLICABLE"), (REF + "row_sum", "cuda", None)])
def test_screen_ends_a_run_without_an_implementation_or_device(impl, device, verdict):
    import torch

    st = _state(impl=impl, device=device)
    if verdict is None:
        verdict = None if torch.cuda.is_available() else "INCONCLUSIVE"
    if verdict is None:
        stage_screen(st)
        return
    with pytest.raises(Stop) as stop:
        stage_screen(st)
    assert stop.value.verdict.verdict == verdict


def test_plan_builds_cases_and_sensitivity_partners():
    st = _state()
    stage_plan(st)
    assert st.plan == [(7, "explicit")]
    partners = [k for k, c in st.cases.items() if c.meta.get("sensitivity_of")]
    assert partners and all(c.meta["sensitivity_of"] in st.cases for k, c in st.cases.items() if k in partners)


def test_findings_fail_a_tampered_channel_and_crash_on_missing_results():
    st = _state()
    stage_plan(st)
    st.outcome = {"results": [], "encoded_cases": [], "channel_tampered": "child 0 reported 9 result(s) for 6 case(s)"}
    with pytest.raises(Stop) as stop:
        stage_findings(st)
    v = stop.value.verdict
    assert v.verdict == "CRASH" and {"channel_tampered", "missing_result"} <= {f["kind"] for f in v.findings}


def _measured(st, ok, findings=()):
    m = {"names": {"distinct_extra": 0 if ok else 3}, "point": {"N": 8}, "seed_class": "explicit"}
    st.findings = list(findings)
    st.evaluated = [(m, 0.0 if ok else 3.0, 0.0, 0.0 if ok else float("inf"), ok)]
    st.kw = {"findings": st.findings}


def test_decide_alone():
    st = _state()
    _measured(st, True)
    assert stage_decide(st).verdict == "PASS"
    _measured(st, True, [{"kind": "replay_mismatch", "severity": "fail", "case": "c", "detail": "differ"}])
    assert stage_decide(st).verdict == "FAIL"
    st.evaluated = []
    assert stage_decide(st).verdict == "FAIL"  # nothing measured, an invariant violated: never INCONCLUSIVE
    st.findings, st.kw = [], {"findings": []}
    assert stage_decide(st).verdict == "INCONCLUSIVE"
