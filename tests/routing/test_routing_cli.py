"""``python -m workers.routing audit``: exit codes of the replay gate and a bad record named on stderr."""

import copy

import orjson

from tests.fcr.test_routes_format import _exp, _valid
from workers.routing.cli import EXIT_DATA, EXIT_OK, EXIT_REPLAY, main
from workers.training.moe import experiment_records


def _write(path, recs):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return str(path)


def test_replay_gate_exit_codes(tmp_path, capsys):
    exp = _valid(_exp())
    held = _write(tmp_path / "held.jsonl", experiment_records(exp, trainer_routes="replayed_routes", replay="R3"))
    broken = _write(tmp_path / "broken.jsonl", experiment_records(exp, replay="R3"))
    free = _write(tmp_path / "free.jsonl", experiment_records(exp, replay="none"))
    assert main(["audit", held, "--require-replay"]) == EXIT_OK
    assert "replay PASS" in capsys.readouterr().out
    assert main(["audit", broken]) == EXIT_REPLAY
    out = capsys.readouterr().out
    assert "replay FAIL" in out and "FAIL call moe-ground-truth-s0-0" in out
    assert main(["audit", free]) == EXIT_OK
    assert main(["audit", free, "--require-replay"]) == EXIT_REPLAY


def test_bad_record_is_named(tmp_path, capsys):
    recs = experiment_records(_valid(_exp()))
    bad = copy.deepcopy(recs[1])
    bad["trainer"]["routed_experts"][3][1] = [0, 0, 1]
    assert main(["audit", _write(tmp_path / "bad.jsonl", [recs[0], bad]), "--json"]) == EXIT_DATA
    err = capsys.readouterr().err
    assert "line 2 (call moe-ground-truth-s0-1): trainer.routed_experts[3][1]" in err and "selected twice" in err
