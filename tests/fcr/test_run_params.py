"""Run parameters in the log itself (docs/fcr.md#run-parameters; workers/fcr/run_params.py): the optional
``run_config`` / ``run_tags`` of a record reach the validation summary with the record that gave them, a record whose
value differs from its run's first is an error naming both records, a wrong shape is an error naming the field, and the
Parquet path (checked by columns) agrees with the record path."""

from __future__ import annotations

import copy

import orjson
import pytest

from workers.fcr import parquet_write
from workers.fcr.record_check import validate_record
from workers.fcr.synth import SynthConfig, iter_run
from workers.fcr.validate import validate_file

BASE = list(iter_run(SynthConfig(trajectories=3, seed=3, response_len=(3, 6), top_k=2, steps=2)))


def write(tmp_path, recs, name="run.jsonl"):
    path = tmp_path / name
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return path


def declaring(config=None, tags=None, every=True):
    recs = [copy.deepcopy(r) for r in BASE]
    for i, r in enumerate(recs):
        if every or i == 1:
            if config is not None:
                r["run_config"] = config
            if tags is not None:
                r["run_tags"] = tags
    return recs


def test_the_summary_carries_the_runs_parameters_and_the_record_that_gave_them(tmp_path):
    recs = declaring({"lr": 3e-6, "algo": "grpo"}, ["7b", "grpo"], every=False)
    summary = validate_file(write(tmp_path, recs))
    assert summary["valid"], summary["errors"]
    run = recs[0]["run_id"]
    assert summary["run_params"] == {
        run: {
            "run_config": {"value": {"lr": 3e-6, "algo": "grpo"}, "line": 2, "call_id": recs[1]["call_id"]},
            "run_tags": {"value": ["7b", "grpo"], "line": 2, "call_id": recs[1]["call_id"]},
        }
    }


def test_a_log_without_them_has_none(tmp_path):
    assert validate_file(write(tmp_path, BASE))["run_params"] == {}


def test_a_record_that_disagrees_with_its_run_is_an_error_naming_both_records(tmp_path):
    recs = declaring({"lr": 1})
    recs[-1]["run_config"] = {"lr": 2}
    summary = validate_file(write(tmp_path, recs))
    assert not summary["valid"] and summary["error_count"] == 1
    error = summary["errors"][0]
    assert error["line"] == len(recs) and error["call_id"] == recs[-1]["call_id"] and error["field"] == "run_config"
    assert f"given on line 1 (call {recs[0]['call_id']})" in error["reason"]
    assert summary["valid_records"] == len(recs) - 1


def test_another_run_may_declare_other_values(tmp_path):
    recs = declaring(tags=["a"])
    other = copy.deepcopy(recs[0])
    other["run_id"], other["run_tags"] = "another-run", ["b"]
    summary = validate_file(write(tmp_path, [*recs, other]))
    assert summary["valid"], summary["errors"]
    assert summary["run_params"]["another-run"]["run_tags"]["value"] == ["b"]


@pytest.mark.parametrize(
    "field,value",
    [("run_config", [1, 2]), ("run_config", "lr=1"), ("run_tags", "a,b"), ("run_tags", ["a", 1]), ("run_tags", {})],
)
def test_a_wrong_shape_is_an_error_on_the_field_in_both_forms_of_the_check(field, value):
    rec = copy.deepcopy(BASE[0])
    rec[field] = value
    detailed = validate_record(rec, lint=True)
    fast = validate_record(rec, lint=False)  # tries the fast form first; it must refuse what the sections refuse
    assert [i.field for i in detailed] == [field] and [i.field for i in fast] == [field]


def test_a_value_too_large_to_carry_is_refused(tmp_path):
    summary = validate_file(write(tmp_path, declaring({"blob": "x" * (65 * 1024)}, every=False)))
    assert not summary["valid"] and summary["errors"][0]["field"] == "run_config"
    assert "at most 64 KiB" in summary["errors"][0]["reason"]


def test_parquet_checked_by_columns_agrees_with_the_record_path(tmp_path):
    recs = declaring({"lr": 1}, ["p"])
    recs[2]["run_config"] = {"lr": 5}
    src = write(tmp_path, recs)
    dst = tmp_path / "run.parquet"
    parquet_write.jsonl_to_parquet(src, dst)
    by_columns = validate_file(dst)
    assert by_columns == validate_file(dst, by_columns=False)
    assert by_columns["error_count"] == 1 and by_columns["errors"][0]["line"] == 3
    assert by_columns["run_params"][recs[0]["run_id"]]["run_config"]["value"] == {"lr": 1}
