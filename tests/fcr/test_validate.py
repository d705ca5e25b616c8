"""Structural validation (R0; docs/fcr.md#record-fields, docs/fcr.md#conventions) of fcr/1 records and files."""

from __future__ import annotations

import copy
import gzip

import orjson
import pytest

from workers.fcr import FcrIssue, validate_file, validate_record
from workers.fcr.validate import array_bools_possible, ids_sha256


def fields(issues, severity="error"):
    return [i.field for i in issues if i.severity == severity]


def set_path(rec, path, value):
    *head, last = path.split(".")
    d = rec
    for k in head:
        d = d[k]
    if value is KeyError:
        del d[last]
    else:
        d[last] = value
    return rec


def test_example_a_is_valid(rec):
    assert validate_record(rec) == []
    assert validate_record(rec, no_array_bools=True) == []
    # the hash convention of docs/fcr.md#conventions holds for the documented example's numbers
    assert ids_sha256(rec["prompt"]["token_ids"]) == rec["prompt"]["ids_sha256"]
    assert ids_sha256(rec["response"]["token_ids"]) == rec["response"]["ids_sha256"]
    assert validate_record(rec, check_hashes=True) == []


def test_issue_to_dict():
    d = FcrIssue(3, "c", "rollout.logprobs[1]", "bad").to_dict()
    assert d == {"line": 3, "call_id": "c", "field": "rollout.logprobs[1]", "reason": "bad", "severity": "error"}


BAD = [
    ("schema", "fcr/2", "schema"),
    ("schema", KeyError, "schema"),
    ("run_id", 5, "run_id"),
    ("call_id", "", "call_id"),
    ("step", True, "step"),
    ("step", 1.0, "step"),
    ("call_index", "0", "call_index"),
    ("role", "assistant", "role"),
    ("role_source", "guess", "role_source"),
    ("model", KeyError, "model"),
    ("model.policy_version", "7", "model.policy_version"),
    ("tokenizer.sha256", None, "tokenizer.sha256"),
    ("chat_template", KeyError, "chat_template"),
    ("chat_template", "abc", "chat_template"),
    ("engine", [], "engine"),
    ("sampling", KeyError, "sampling"),
    ("source", KeyError, "source"),
    ("prompt.provenance", "trust-me", "prompt.provenance"),
    ("prompt.token_ids", KeyError, "prompt.token_ids"),
    ("prompt.token_ids", "0,1", "prompt.token_ids"),
    ("prompt.ids_sha256", KeyError, "prompt.ids_sha256"),
    ("prompt.context_event", "rewrite", "prompt.context_event"),
    ("response.provenance", "guess", "response.provenance"),
    ("response.token_ids", [20, -1, 3], "response.token_ids[1]"),
    ("response.token_ids", [20, 21.0, 3], "response.token_ids[1]"),
    ("response.token_ids", [20, None, 3], "response.token_ids[1]"),
    ("response.token_ids", [20, "21", 3], "response.token_ids[1]"),
    ("response.usage_completion_tokens", "3", "response.usage_completion_tokens"),
    ("response.text", 5, "response.text"),
    ("rollout", KeyError, "rollout"),
    ("rollout.logprobs", KeyError, "rollout.logprobs"),
    ("rollout.logprobs", [-0.1, -0.2], "rollout.logprobs"),
    ("rollout.logprobs", [-0.1, "x", -0.2], "rollout.logprobs[1]"),
    ("rollout.top_k", [[[20, -0.1]]], "rollout.top_k"),
    ("rollout.top_k", [[[20, -0.1]], {"21": -0.5}, []], "rollout.top_k[1]"),
    ("rollout.top_k", [[[20, -0.1]], [[21, -0.5, 0]], []], "rollout.top_k[1][0]"),
    ("rollout.top_k", [[[20, -0.1]], [[21]], []], "rollout.top_k[1][0]"),
    ("rollout.top_k", [[[20, -0.1]], [], [["3", -0.5]]], "rollout.top_k[2][0]"),
    ("rollout.top_k", [[[20, -0.1], [-4, -3.0]], [], []], "rollout.top_k[0][1]"),
    ("rollout.top_k", [[[20, None]], [], []], "rollout.top_k[0][0]"),
    ("rollout.token_policy_versions", [7, 7], "rollout.token_policy_versions"),
    ("trainer", [], "trainer"),
    ("trainer.logprobs", [-0.1, -0.2, -0.3, -0.4], "trainer.logprobs"),
    ("trainer.loss_mask_used", [1, 2, 1], "trainer.loss_mask_used[1]"),
    ("trainer.loss_mask_used", [1, 1.0, 1], "trainer.loss_mask_used[1]"),
    ("trainer.loss_mask_used", [1, 1], "trainer.loss_mask_used"),
    ("trainer.top_k", [[[20, -0.1]], [[21, -0.2]], [[3, "x"]]], "trainer.top_k[2][0]"),
    ("trainer.sample_id", 3, "trainer.sample_id"),
]


@pytest.mark.parametrize("path,value,field", BAD, ids=[f"{p}={v!r}"[:60] for p, v, _ in BAD])
def test_structural_error_named(rec, path, value, field):
    bad = set_path(rec, path, value)
    for fast in (False, True):  # the C fast paths and the exact path agree on the first bad field
        errs = fields(validate_record(copy.deepcopy(bad), line=9, no_array_bools=fast))
        assert field in errs, (fast, errs)
    issue = next(i for i in validate_record(bad, line=9) if i.field == field)
    assert issue.line == 9 and issue.severity == "error" and issue.reason
    assert issue.call_id == (bad["call_id"] if isinstance(bad.get("call_id"), str) and bad["call_id"] else None)


def test_bool_ids_are_errors_in_files(rec, write_jsonl):
    """JSON ``true`` in an id array must not slip through the array('Q') fast path as id 1."""
    rec["response"]["token_ids"] = [20, True, 3]
    line = orjson.dumps(rec)
    assert array_bools_possible(line)
    out = validate_file(write_jsonl([line]))
    assert not out["valid"]
    assert out["errors"][0]["field"] == "response.token_ids[1]"


def test_array_bools_possible():
    assert not array_bools_possible(b'{"a":true,"b": false,"c":[1,2]}')
    assert array_bools_possible(b'{"a":[1, true]}')
    assert array_bools_possible(b'{"a":[false]}')
    assert array_bools_possible(b'{"t":"x,true"}')  # conservative on strings: only costs speed


def test_nullable_fields_may_be_absent(rec):
    del rec["response"]["text"], rec["prompt"]["task_prompt_sha256_declared"]
    del rec["prompt"]["task_prompt_sha256_observed"], rec["trainer"]
    del rec["rollout"]["top_k"]
    assert validate_record(rec) == []


def test_audit_matters_are_warnings_only(rec):
    rec["rollout"]["logprobs"] = [-0.1, -9999.0, 0.5]
    rec["rollout"]["top_k"][0].reverse()  # unsorted top-K: the audit's business, not even a warning here
    rec["prompt"]["ids_sha256"] = "0" * 64
    rec["engine"]["logprobs_mode"] = "whatever"
    issues = validate_record(rec, check_hashes=True)
    assert fields(issues) == []
    w = fields(issues, "warning")
    assert "rollout.logprobs[1]" in w and "rollout.logprobs[2]" in w
    assert "prompt.ids_sha256" in w and "engine.logprobs_mode" in w
    assert fields(validate_record(rec, lint=False), "warning") == ["engine.logprobs_mode"]


def test_integral_logprobs_accepted(rec):
    rec["rollout"]["top_k"][0][0][1] = 0  # a JS client writes 0.0 as 0
    rec["rollout"]["logprobs"][0] = -1
    assert fields(validate_record(rec)) == []
    assert fields(validate_record(rec, no_array_bools=True)) == []


def test_non_object(rec):
    for v in ([rec], "x", 3, None):
        issues = validate_record(v, line=4)
        assert len(issues) == 1 and issues[0].line == 4 and issues[0].severity == "error"


# ---------------------------------------------------------------------------------------------- files


def _other(rec, i, **over):
    r = copy.deepcopy(rec)
    r["call_id"] = f"tA-{i}"
    r["call_index"] = i
    r.update(over)
    return r


def test_file_summary(rec, write_jsonl):
    bg = _other(rec, 1, role="background", run_id="run-b", step=3)
    del bg["trainer"]
    del bg["rollout"]["top_k"]
    p = write_jsonl([rec, b"", b"   ", bg, _other(rec, 2, step=9)])
    out = validate_file(p)
    assert out["valid"] and out["error_count"] == 0
    assert out["records"] == 3 and out["valid_records"] == 3
    assert out["runs"] == ["run-b", "run-toy"]
    assert out["steps"] == {"min": 3, "max": 9}
    assert out["calls_by_role"] == {"policy": 2, "background": 1, "unknown": 0}
    assert out["policy_tokens"] == 6 and out["response_tokens"] == 9
    assert out["has_trainer_logprobs"] and out["has_top_k"]
    assert out["duplicate_call_ids"] == 0
    assert out["bytes_read"] == p.stat().st_size


def test_file_errors_carry_line_numbers(rec, write_jsonl):
    bad = copy.deepcopy(rec)
    bad["rollout"]["logprobs"] = [-0.1]
    p = write_jsonl([rec, b"{not json", b"[1,2]", bad, b'"str"'])
    out = validate_file(p)
    assert not out["valid"] and out["error_count"] == 4 and out["records"] == 5 and out["valid_records"] == 1
    lines = [(e["line"], e["field"]) for e in out["errors"]]
    assert lines == [(2, ""), (3, ""), (4, "rollout.logprobs"), (5, "")]
    assert "JSON" in out["errors"][0]["reason"]


def test_max_errors_caps_list_not_count(rec, write_jsonl):
    p = write_jsonl([b"{"] * 30)
    out = validate_file(p, max_errors=5)
    assert out["error_count"] == 30 and len(out["errors"]) == 5


def test_duplicates(rec, write_jsonl):
    out = validate_file(write_jsonl([rec, rec, _other(rec, 1), rec]))
    assert out["valid"] and out["duplicate_call_ids"] == 2
    assert [w["line"] for w in out["warnings"] if w["field"] == "call_id"] == [2, 4]


def test_empty_file_is_invalid(write_jsonl, tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_bytes(b"")
    out = validate_file(p)
    assert not out["valid"] and out["records"] == 0


def test_gzip(rec, write_jsonl):
    recs = [_other(rec, i) for i in range(50)]
    plain = validate_file(write_jsonl(recs))
    gz = write_jsonl(recs, name="g.jsonl", gz=True)
    out = validate_file(gz)
    assert out["valid"] and out["compressed"] and out["records"] == 50
    assert out["bytes_read"] == gz.stat().st_size
    for k in ("records", "policy_tokens", "calls_by_role", "steps"):
        assert out[k] == plain[k]


def test_truncated_gzip_is_an_error_not_an_exception(rec, tmp_path):
    data = b"".join(orjson.dumps(_other(rec, i)) + b"\n" for i in range(400))
    z = gzip.compress(data)
    p = tmp_path / "t.jsonl.gz"
    p.write_bytes(z[: len(z) * 2 // 3])
    out = validate_file(p)
    assert not out["valid"]
    last = out["errors"][-1]
    assert "truncated" in last["reason"] or "JSON" in last["reason"]
    assert 1 < last["line"] <= 400
    assert 0 < out["valid_records"] < 400  # every complete line before the cut is still validated
    assert out["valid_records"] == last["line"] - 1


def test_corrupt_gzip(tmp_path):
    p = tmp_path / "c.gz"
    p.write_bytes(b"\x1f\x8b" + b"\x00garbage" * 10)
    out = validate_file(p)
    assert not out["valid"] and out["errors"][0]["line"] == 1


def test_progress(rec, write_jsonl):
    import random

    rng = random.Random(1)
    recs = []
    for i in range(60):  # random ids so that gzip cannot swallow the file in one 1 MiB read
        r = _other(rec, i)
        r["prompt"]["token_ids"] = [rng.randrange(1 << 30) for _ in range(6000)]
        recs.append(r)
    for gz in (False, True):
        seen = []
        p = write_jsonl(recs, name=f"p{gz}.jsonl", gz=gz)
        validate_file(p, progress=lambda f, m: seen.append(f), progress_every_bytes=4096)
        assert seen[-1] == 1.0
        assert len(seen) >= 4, seen
        assert all(0 <= a <= b <= 1 for a, b in zip(seen, seen[1:]))
        assert seen[0] < 0.5  # fraction tracks consumption, not just the end
