"""``python -m workers.fcr synth``: the README's first command makes a valid run log of the requested shape."""

from __future__ import annotations

import gzip

import orjson
import pytest

from workers.fcr.__main__ import main


def test_synth_writes_a_run_the_certifier_reads(tmp_path, capsys):
    out = tmp_path / "run.jsonl.gz"
    assert main(["synth", str(out), "--run-id", "r1", "--trajectories", "3", "--steps", "2", "--seed", "7"]) == 0
    records = [orjson.loads(line) for line in gzip.open(out)]
    assert records and {r["run_id"] for r in records} == {"r1"}
    assert {r["step"] for r in records} <= {0, 1}
    assert "run r1" in capsys.readouterr().out
    from workers.certify.file import certify_file

    assert certify_file(str(out))["summary"]["sequences"] > 0


def test_synth_refuses_nonsense_shapes(tmp_path):
    with pytest.raises(SystemExit):
        main(["synth", str(tmp_path / "x.jsonl"), "--trajectories", "0"])
