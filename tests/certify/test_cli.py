"""python -m workers.certify: human output by default, JSON with --json, exit 1 on DATA_ERROR, exit 2 when a
requested threshold or budget fails. Two real subprocess runs; the other cases call cli.main in-process
(importing torch in a fresh interpreter costs seconds)."""

import json
import subprocess
import sys

import orjson

from workers.certify.cli import main

GOOD = {
    "step": 1,
    "call_id": "g",
    "role": "policy",
    "response": {"token_ids": [1, 2]},
    "rollout": {"logprobs": [-0.001, -0.002]},
    "trainer": {"logprobs": [-0.0011, -0.002]},
}


def files(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_bytes(orjson.dumps(GOOD) + b"\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(
        orjson.dumps(GOOD)
        + b"\n"
        + orjson.dumps({**GOOD, "call_id": "b", "rollout": {"logprobs": [0.5, -0.1]}})
        + b"\n"
    )
    return good, bad


def test_cli_subprocess(tmp_path):
    good, bad = files(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "workers.certify", str(good), "--threshold", "0.01"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert "eps_hat" in r.stdout and "visited contexts" in r.stdout
    r = subprocess.run([sys.executable, "-m", "workers.certify", str(bad), "--json"], capture_output=True, text=True)
    assert r.returncode == 1
    cert = json.loads(r.stdout)
    assert cert["errors"][0]["line"] == 2 and cert["errors"][0]["call_id"] == "b"


def test_cli_exit_codes_in_process(tmp_path, capsys):
    good, bad = files(tmp_path)
    assert main([str(good), "--json", "--threshold", "0.01"]) == 0
    cert = json.loads(capsys.readouterr().out)
    assert cert["summary"]["threshold_passed"] is True and cert["summary"]["sequences_certified"] == 1
    # the TV upper end of a sampled-only token is 1 − min(p, q) ≈ 0.002: a 1e-4 threshold cannot be certified
    assert main([str(good), "--threshold", "1e-4"]) == 2
    assert main([str(good), "--budget", "1e-9"]) == 2
    assert main([str(good), "--budget", "10"]) == 0
    capsys.readouterr()
    assert main([str(bad), "--precision", "bf16", "--constants", "tight", "--mode", "kl"]) == 1
    assert "DATA_ERROR line 2 call b" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.jsonl")]) == 1


def test_the_first_line_is_the_runs_verdict_as_the_portal_words_it(tmp_path, capsys):
    """The CI command says the verdict the portal's run page and runs table show for the same certificate
    (workers/certify/verdict.py, one place), before any number."""
    from workers.certify.file import certify_file
    from workers.certify.verdict import run_verdict

    good, _ = files(tmp_path)
    assert main([str(good)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    cert = certify_file(str(good))
    verdict = run_verdict(cert["summary"], cert["bounds"], cert["options"])
    assert first == f"verdict: {verdict.label}. {verdict.sentence}"
