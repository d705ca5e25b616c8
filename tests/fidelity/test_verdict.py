"""Verdicts that cannot be misread: the report leads with coverage, zero verifiable tokens is never a plain PASS, and
an optional coverage gate (``min_coverage`` / ``--min-coverage``) turns too little coverage into FAIL for CI."""

from __future__ import annotations

import pytest

from workers.fidelity import audit_records
from workers.fidelity.cli import main
from workers.fidelity.verdict import NOTHING_VERIFIABLE, check_min_coverage, headline

from .helpers import dumps, variant


def test_zero_verifiable_tokens_is_never_a_plain_pass(A):
    no_trainer = variant(A, trainer=KeyError)  # what every imported inference log looks like before a join
    rep = audit_records([no_trainer])
    assert rep["verdict"] == "PASS" and rep["closed_failure_violations"] == 0
    assert rep["verdict_label"] == NOTHING_VERIFIABLE
    assert rep["headline"] == "0% of policy tokens verifiable (0 of 3)"
    assert any("no policy token is verifiable" in w and "join" in w for w in rep["protocol_warnings"])


def test_verifiable_log_passes_plainly_and_leads_with_coverage(A, toy):
    rep = audit_records([A], tokenizer=toy)
    assert rep["verdict"] == rep["verdict_label"] == "PASS"
    assert rep["headline"] == "100% of policy tokens verifiable (3 of 3)"
    assert not any("no policy token" in w for w in rep["protocol_warnings"])


def test_min_coverage_gate(A, toy):
    half = variant(
        A, call_id="half", **{"rollout.logprobs": [-0.105361, None, -0.01005], "trainer.loss_mask_used": [1, 0, 1]}
    )
    rep = audit_records([half], tokenizer=toy, min_coverage=0.5)  # 2 of 3 verifiable
    assert rep["verdict"] == "PASS"
    rep = audit_records([half], tokenizer=toy, min_coverage=0.9)
    assert rep["verdict"] == "FAIL"
    assert rep["verdict_reasons"] == [
        "coverage gate: 66.67% of policy tokens verifiable (2 of 3), below the required 90.00%"
    ]
    assert rep["headline"].startswith("66.7% of policy tokens verifiable")
    with pytest.raises(ValueError, match="min_coverage"):
        audit_records([half], min_coverage=90)


def test_cli_gate_exit_codes_and_human_output(A, toy, tmp_path, capsys):
    import json

    path = tmp_path / "run.jsonl"
    path.write_bytes(dumps([variant(A, trainer=KeyError)]))
    assert main(["audit", str(path)]) == 0  # closed failure holds ...
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "0% of policy tokens verifiable (0 of 3)"  # ... but the coverage comes first
    assert NOTHING_VERIFIABLE in out and "closed failure only" in out
    assert main(["audit", str(path), "--min-coverage", "1%"]) == 1  # the CI gate
    assert "coverage gate" in capsys.readouterr().out
    vocab = tmp_path / "v.json"
    from .conftest import TOY_VOCAB_JSON

    vocab.write_text(TOY_VOCAB_JSON)
    path.write_bytes(dumps([A]))
    assert main(["audit", str(path), "--toy-vocab", str(vocab), "--min-coverage", "0.99", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["min_coverage"] == 0.99
    with pytest.raises(SystemExit):
        main(["audit", str(path), "--min-coverage", "150%"])
    assert "min_coverage must be a fraction" in capsys.readouterr().err


@pytest.mark.parametrize(
    "v,n,text",
    [
        (0, 0, "no policy tokens in the log: nothing is verifiable"),
        (1, 100_000, "0.001% of policy tokens verifiable (1 of 100,000)"),
        (1, 10**9, "< 0.001% of policy tokens verifiable (1 of 1,000,000,000)"),
        (99_999, 100_000, "99.99% of policy tokens verifiable (99,999 of 100,000)"),
        (31, 1000, "3.1% of policy tokens verifiable (31 of 1,000)"),
    ],
)
def test_headline_never_rounds_to_zero_or_all(v, n, text):
    assert headline(v, n) == text


@pytest.mark.parametrize("bad", [-0.1, 1.5, True, "0.5"])
def test_min_coverage_must_be_a_fraction(bad):
    with pytest.raises(ValueError):
        check_min_coverage(bad)
