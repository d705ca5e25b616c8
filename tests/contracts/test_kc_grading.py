"""Grades (docs/contract-language.md#grades): KC-C per family with the no-cherry-picking rule, KC-A under deployment
flags, quality warnings, targets, interop."""

from workers.contracts.grading import grade, interop
from workers.contracts.schema import CLASSES


def v(cls, verdict="PASS", level=3, margin=0.1, reason=""):
    return {
        "contract_id": f"{cls}/op/sig",
        "contract_class": cls,
        "verdict": verdict,
        "assurance_level": level,
        "margin": margin,
        "reason": reason,
    }


def all_pass(**over):
    return [over.get(c, v(c)) for c in CLASSES]


def test_full_pass_with_hidden_seeds_is_level_3_everywhere():
    g = grade(all_pass())
    assert g["kc_c"] == {"PRC": 3, "ORD": 3, "CMP": 3, "EXC": 3}
    assert g["kc_a"] == g["kc_c"]


def test_one_failing_class_zeroes_only_its_family():
    g = grade(all_pass(**{"C-ORD-02": v("C-ORD-02", "FAIL", margin=float("inf"))}))
    assert g["kc_c"] == {"PRC": 3, "ORD": 0, "CMP": 3, "EXC": 3}
    assert g["families"]["ORD"]["limiting"] == ["C-ORD-02"]


def test_no_cherry_picking_missing_class_and_repeated_runs():
    vs = [x for x in all_pass() if x["contract_class"] != "C-CMP-03"]
    assert grade(vs)["kc_c"]["CMP"] == 0
    vs = all_pass() + [v("C-PRC-01", "FAIL")]  # a second, failing verdict for the same class counts
    assert grade(vs)["kc_c"]["PRC"] == 0


def test_public_seed_runs_reach_level_1_only():
    g = grade(all_pass(**{"C-EXC-01": v("C-EXC-01", level=1)}))
    assert g["kc_c"]["EXC"] == 1 and g["kc_c"]["PRC"] == 3


def test_not_applicable_needs_a_reason_and_not_declared_zeroes():
    g = grade(all_pass(**{"C-ORD-03": v("C-ORD-03", "NOT_APPLICABLE", reason="no batched op")}))
    assert g["kc_c"]["ORD"] == 3
    assert grade(all_pass(**{"C-ORD-03": v("C-ORD-03", "NOT_APPLICABLE")}))["kc_c"]["ORD"] == 0
    g = grade(all_pass(**{"C-EXC-02": v("C-EXC-02", "NOT_DECLARED")}))
    assert g["kc_c"]["EXC"] == 0 and g["not_declared"] == ["C-EXC-02"]


def test_crash_timeout_inconclusive_do_not_pass():
    for verdict in ("CRASH", "TIMEOUT", "INCONCLUSIVE"):
        assert grade(all_pass(**{"C-CMP-01": v("C-CMP-01", verdict)}))["kc_c"]["CMP"] == 0


def test_quality_warning_passes_but_is_listed():
    g = grade(all_pass(**{"C-PRC-02": v("C-PRC-02", "QUALITY_WARNING", margin=0.8)}))
    assert g["kc_c"]["PRC"] == 3
    assert [w["class"] for w in g["quality_warnings"]] == ["C-PRC-02"]


def test_kc_a_drops_under_deployment_flags_unless_measured(shipped):
    contracts = list(shipped.values())
    g = grade(all_pass(), deployment_flags={"allow_tf32": True}, contracts=contracts)
    assert g["kc_c"]["PRC"] == 3 and g["kc_a"]["PRC"] == 0 and g["kc_a"]["ORD"] == 3
    assert "C-PRC-01" in g["voided_by_deployment"]
    g = grade(all_pass(), deployment_flags={"flush_denormal": True}, contracts=contracts)
    assert g["kc_a"]["PRC"] == 0
    # measured under the flags: the measurement decides
    dep = [v(c) for c in ("C-PRC-01", "C-PRC-04", "C-CMP-02")]
    g = grade(all_pass(), deployment_flags={"allow_tf32": True}, deployment_verdicts=dep, contracts=contracts)
    assert g["kc_a"]["PRC"] == 3
    dep[0] = v("C-PRC-01", "FAIL")
    g = grade(all_pass(), deployment_flags={"allow_tf32": True}, deployment_verdicts=dep, contracts=contracts)
    assert g["kc_a"]["PRC"] == 0 and g["kc_c"]["PRC"] == 3


def test_target_and_attestations():
    g = grade(all_pass(**{"C-ORD-01": v("C-ORD-01", level=1)}), target={"PRC": 3, "ORD": 3})
    assert g["meets_target"] == {"PRC": True, "ORD": False} and g["meets_all_targets"] is False
    g = grade(all_pass(), attestations={"third_party": True, "signed_traces": True, "cross_sku": True})
    assert g["kc_c"] == {"PRC": 4, "ORD": 4, "CMP": 4, "EXC": 4}


def test_accepts_verdict_objects():
    from workers.contracts import run_contract

    real = run_contract("C-EXC-02", "workers.contracts.impls.reference:gather_rows", seeds=[7])
    g = grade([real])
    assert g["families"]["EXC"]["classes"]["C-EXC-02"]["verdict"] == "PASS"
    assert g["kc_c"]["EXC"] == 0  # C-EXC-01 not assessed: no cherry-picking
    assert g["families"]["EXC"]["classes"]["C-EXC-02"]["level"] == 1


def test_interop():
    a = [v("C-PRC-01"), v("C-EXC-02")]
    b = [v("C-PRC-01"), v("C-EXC-02", "FAIL")]
    r = interop({"cpu": a, "gpu": b})
    assert r["interop_score"] == 0.5 and r["backend_specific_failures"] == {"cpu": 0, "gpu": 1}
