"""The CI gates (``audit-portal upload --budget`` and ``Run.finish(budget=…)``) say the run's verdict in the portal's
words — the label and sentence of its run page and runs table — beside B* and the budget; an older portal that sends
no verdict leaves the message as it was."""

from audit_portal_client.cli import _summary
from audit_portal_client.outcomes import BudgetExceeded, FinishResult

VERDICT = {
    "code": "vacuous",
    "label": "not certified: the bound says nothing",
    "sentence": "B* = 3.4 is at least the reward range 1; the run needs ε̂ ≤ 0.0004 (it has 0.012).",
}


def result(certificate: dict) -> FinishResult:
    return FinishResult(7, 3, 11, "http://portal/p/lab/runs/3/?certificate=11", certificate)


def test_the_budget_gate_names_the_verdict():
    done = result({"best_bound": 3.4, "verdict": VERDICT})
    assert done.verdict == VERDICT
    said = f"verdict: {VERDICT['label']}. {VERDICT['sentence']}"
    assert (
        str(BudgetExceeded(done, 0.1))
        == f"certificate 11: best bound B* = 3.4 exceeds the budget 0.1; the portal's {said}"
    )
    assert _summary(done).splitlines()[0] == said  # the verdict first, as on the run page


def test_without_a_verdict_the_gate_reads_as_before():
    done = result({"best_bound": None})
    assert done.verdict is None
    assert str(BudgetExceeded(done, 0.1)) == "certificate 11: no bound could be certified (budget 0.1)"
    assert _summary(done).startswith("certificate 11:")
