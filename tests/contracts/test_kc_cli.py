"""The command line (docs/contracts.md#api-and-command-line) through a real subprocess: JSON on stdout, exit codes for
CI."""

import json
import os
import subprocess
import sys
from pathlib import Path

from kc_helpers import REF, VIOL, hostile

ROOT = Path(__file__).resolve().parents[2]


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(
        [sys.executable, "-m", "workers.contracts", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p.returncode, p.stdout, p.stderr


def test_check_pass_and_fail_json_and_exit_codes():
    # the passing implementation is an uploaded single-file module that prints: stdout must stay pure JSON
    rc, out, err = cli("check", "--contract", "C-EXC-02", "--impl", hostile("gather_prints"), "--seeds", "7", "--json")
    d = json.loads(out)
    assert rc == 0, err
    assert d["verdict"] == "PASS"
    assert "hello from the kernel" in err
    for key in ("verdict", "statistic", "bound", "margin", "signature", "reason", "contract_version", "environment"):
        assert key in d


def test_check_fail_exit_code(capsys):
    from workers.contracts.cli import main  # in process: the subprocess path is covered above

    rc = main(["check", "--contract", "C-EXC-02", "--impl", VIOL + "zero_fill_gather", "--seeds", "7", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 1 and d["verdict"] == "FAIL" and d["signature"]["pattern"] == "no_raise_zero_fill"


def test_usage_errors_exit_2_with_json():
    rc, out, _ = cli("check", "--contract", "C-NOPE-01", "--impl", REF + "gather_rows", "--json")
    assert rc == 2 and json.loads(out)["error"] == "unknown_contract"
    rc, out, _ = cli("check", "--contract", "C-EXC-02", "--impl", "no_colon_here", "--json")
    assert rc == 2 and json.loads(out)["error"] == "bad_impl_reference"
    rc, out, _ = cli(
        "check", "--contract", "C-EXC-02", "--impl", REF + "gather_rows", "--flags", '{"tf32": 1}', "--json"
    )
    assert rc == 2 and json.loads(out)["error"] == "bad_arguments" and "tf32" in json.loads(out)["message"]


def test_list_json():
    rc, out, _ = cli("list", "--json")
    rows = json.loads(out)
    assert rc == 0 and len(rows) == 12
    assert {"id", "class", "family", "version", "tolerance", "sha256"} <= set(rows[0])


def test_quality_warning_verdict_and_exit_code(capsys):
    from workers.contracts.cli import main

    rc = main(
        ["check", "--contract", "C-ORD-01", "--impl", hostile("row_mean_uses_most_of_budget"), "--seeds", "7", "--json"]
    )
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "QUALITY_WARNING" and 0.5 < d["margin"] < 1.0
    assert rc == 3
    rc = main(
        [
            "check",
            "--contract",
            "C-ORD-01",
            "--impl",
            hostile("row_mean_uses_most_of_budget"),
            "--seeds",
            "7",
            "--allow-quality-warning",
        ]
    )
    assert rc == 0 and "QUALITY_WARNING" in capsys.readouterr().out
