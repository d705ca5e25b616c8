"""Strict intake in the fcr/1 validator: positive log-probs are flagged at upload (not only by the certificate), a
trainer top-K that misses rollout ids is warned about, and booleans / numeric strings are errors naming the field."""

from __future__ import annotations

import copy

import pytest

from workers.fcr import validate_file, validate_record


def test_positive_logprob_is_flagged_by_upload_validation(rec, write_jsonl):
    bad = copy.deepcopy(rec)
    bad["call_id"] = "pos"
    bad["trainer"]["logprobs"][1] = 0.25
    summary = validate_file(write_jsonl([rec, bad]))  # the upload path: lint off
    assert summary["valid"]  # a faithful log of a bad run still uploads ...
    warns = [w for w in summary["warnings"] if w["call_id"] == "pos"]
    assert [w["field"] for w in warns] == ["trainer.logprobs[1]"]  # ... and is told at once
    assert "positive" in warns[0]["reason"] and "0.25" in warns[0]["reason"]
    assert not validate_file(write_jsonl([rec]))["warnings"]


def test_trainer_topk_missing_rollout_ids_is_warned(rec):
    rec["trainer"]["top_k"][2] = [[3, -0.01005]]  # rollout lists 22 at position 2
    issues = validate_record(rec, lint=True)
    assert [(i.field, i.severity) for i in issues] == [("trainer.top_k[2]", "warning")]
    assert "1 position(s)" in issues[0].reason


@pytest.mark.parametrize(
    "path,value,field",
    [
        (("rollout", "logprobs", 0), False, "rollout.logprobs[0]"),
        (("trainer", "logprobs", 1), "-0.5", "trainer.logprobs[1]"),
        (("trainer", "top_k", 0, 1, 1), True, "trainer.top_k[0][1]"),
        (("rollout", "top_k", 1, 0, 0), -2, "rollout.top_k[1][0]"),
        (("response", "token_ids", 2), -1, "response.token_ids[2]"),
    ],
)
def test_wrong_types_and_ids_are_errors_with_the_field(rec, path, value, field):
    cur = rec
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    errors = [i for i in validate_record(rec) if i.severity == "error"]
    assert [i.field for i in errors] == [field]
