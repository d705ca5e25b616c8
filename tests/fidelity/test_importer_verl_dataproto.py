"""verl DataProto rows (one sample of a batch per line, every tensor a list): ``prompts`` left-padded and
``responses`` right-padded to fixed widths, ``attention_mask`` over both, ``response_mask`` (0 on padding and on
tool tokens), the engine's ``rollout_log_probs`` and the trainer's ``old_log_probs`` (padded too), and the non-tensor
``uid`` / ``traj_uid`` / ``param_version_start`` / ``_end`` / ``global_steps``. Fixtures written for these tests
from reading verl's agent loop ``_postprocess`` and ``ray_trainer.py`` (not captured). Both sides are imported at
once; padding never becomes tokens; tool tokens are never a call's response; lengths that disagree are refused by
name; verl's bypass mode (``old_log_probs`` = ``rollout_log_probs``) writes no trainer block (#27)."""

from __future__ import annotations

import orjson

from workers.fcr import validate_file
from workers.fidelity import audit_file
from workers.fidelity.cli import main

from .conftest import PROMPT_A, TASK_LIST_FILES
from .helpers import dumps

PAD = 3  # verl pads with pad_token_id; many tokenizers set it to EOS, which is also a real token (<|end|> here)
PROMPT_W, RESP_W = 16, 10
MESSAGES = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List files"}]


def row(resp, mask, lps, old, *, traj="t-0", **over):
    """One DataProto row: ``resp`` / ``mask`` / ``lps`` / ``old`` over the real response, padded as verl pads them
    (0.0 rollout log-probs on padding; the trainer recomputes every position, here −6.0)."""
    P, n = len(PROMPT_A), len(resp)
    lpad, rpad = PROMPT_W - P, RESP_W - n
    r = {
        "prompts": [PAD] * lpad + PROMPT_A,
        "responses": resp + [PAD] * rpad,
        "input_ids": [PAD] * lpad + PROMPT_A + resp + [PAD] * rpad,
        "attention_mask": [0] * lpad + [1] * P + [1] * n + [0] * rpad,
        "position_ids": [0] * lpad + list(range(P + n)) + [0] * rpad,
        "response_mask": mask + [0] * rpad,
        "rollout_log_probs": lps + [0.0] * rpad,
        "old_log_probs": old + [-6.0] * rpad,
        "ref_log_prob": [-0.3] * RESP_W,
        "uid": "grp-1",
        "traj_uid": traj,
        "raw_prompt": MESSAGES,
        "task_prompt_sha256_declared": TASK_LIST_FILES,
        "param_version_start": 4,
        "param_version_end": 4,
        "global_steps": 9,
    }
    r.update(over)
    return r


# a GRPO group of two single-turn samples of one prompt
A = row([20, 21, 3], [1, 1, 1], [-0.1, -0.5, -0.01], [-0.11, -0.51, -0.02], traj="t-0")
B = row([20, 24, 22, 3], [1, 1, 1, 1], [-0.2, -1.3, -0.7, -0.05], [-0.21, -1.25, -0.72, -0.06], traj="t-1")
# multi-turn: model [20, 21, 3], tool output [44, 45, 3] (mask 0, verl logs 0.0), model [20, 3]
TOOL = row(
    [20, 21, 3, 44, 45, 3, 20, 3],
    [1, 1, 1, 0, 0, 0, 1, 1],
    [-0.1, -0.5, -0.01, 0.0, 0.0, 0.0, -0.2, -0.02],
    [-0.11, -0.51, -0.02, -4.0, -3.0, -0.9, -0.21, -0.03],
)


def imported(tmp_path, rows):
    src, dst = tmp_path / "batch.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(rows))
    args = ["import", "verl", str(src), str(dst), "--engine", "vllm", "--logprobs-mode", "processed_logprobs"]
    assert main(args + ["--generation-config-source", "request_only"]) == 0
    return [orjson.loads(x) for x in dst.read_bytes().splitlines()], dst


def test_a_clean_grpo_batch_is_fully_verifiable(tmp_path, toy):
    recs, dst = imported(tmp_path, [A, B])
    a, b = recs
    # padding stripped by the attention mask (the pad id 3 is kept where it is a real token: the prompt's <|end|>s
    # and each response's final EOS)
    assert a["prompt"]["token_ids"] == PROMPT_A == b["prompt"]["token_ids"]
    assert (a["response"]["token_ids"], b["response"]["token_ids"]) == ([20, 21, 3], [20, 24, 22, 3])
    assert a["rollout"]["logprobs"] == [-0.1, -0.5, -0.01]
    assert b["rollout"]["logprobs"] == [-0.2, -1.3, -0.7, -0.05]
    assert a["trainer"]["logprobs"] == [-0.11, -0.51, -0.02] and a["trainer"]["loss_mask_used"] == [1, 1, 1]
    assert b["trainer"]["logprobs"] == [-0.21, -1.25, -0.72, -0.06]
    assert (a["trajectory_id"], b["trajectory_id"], a["extra"]["group_uid"]) == ("t-0", "t-1", "grp-1")
    assert (a["step"], a["model"]["policy_version"], a["role"]) == (9, 4, "policy")
    assert a["prompt"]["task_prompt_sha256_declared"] == a["prompt"]["task_prompt_sha256_observed"] == TASK_LIST_FILES
    assert validate_file(dst)["valid"]
    rep = audit_file(dst, tokenizer=toy, mode="merged")
    assert rep["headline"] == "100% of policy tokens verifiable (7 of 7)", [c["reasons"] for c in rep["calls"]]
    assert rep["closed_failure_violations"] == 0


def test_tool_tokens_in_the_response_are_not_engine_sampled(tmp_path, toy):
    recs, dst = imported(tmp_path, [TOOL])
    first, second = recs
    assert (first["response"]["token_ids"], second["response"]["token_ids"]) == ([20, 21, 3], [20, 3])
    assert second["prompt"]["token_ids"] == PROMPT_A + [20, 21, 3, 44, 45, 3]  # the tool output is prompt
    assert second["rollout"]["logprobs"] == [-0.2, -0.02] and second["trainer"]["logprobs"] == [-0.21, -0.03]
    assert second["extra"]["response_span"] == [6, 8]
    sampled = [t for r in recs for t in r["response"]["token_ids"]]
    assert 44 not in sampled and 45 not in sampled
    rep = audit_file(dst, tokenizer=toy, mode="merged")
    assert rep["coverage"]["verifiable_policy_tokens"] == 5, [c["reasons"] for c in rep["calls"]]


def test_padding_never_becomes_tokens(tmp_path):
    # a response that fills its width has no padding; a prompt with no padding likewise
    full = row([20, 21, 24, 22, 20, 21, 24, 22, 20, 3], [1] * 10, [-0.1] * 10, [-0.2] * 10)
    wide = dict(full, prompts=PROMPT_A, input_ids=PROMPT_A + full["responses"], attention_mask=[1] * 22)
    recs, _ = imported(tmp_path, [A, full, wide])
    assert [len(r["response"]["token_ids"]) for r in recs] == [3, 10, 10]
    assert [len(r["prompt"]["token_ids"]) for r in recs] == [12, 12, 12]
    assert all(len(r["rollout"]["logprobs"]) == len(r["response"]["token_ids"]) for r in recs)
    # the 7 padding log-probs (0.0) and trainer values (−6.0) of A are nowhere
    assert 0.0 not in recs[0]["rollout"]["logprobs"] and -6.0 not in recs[0]["trainer"]["logprobs"]


def _refusal(tmp_path, bad):
    """The row is a ``missing`` record (no ids, no log-probs: nothing of it verifiable) naming why; the next row of
    the batch is imported."""
    recs, _ = imported(tmp_path, [bad, A])
    assert (recs[0]["response"]["provenance"], recs[0]["response"]["token_ids"], recs[0]["rollout"]["logprobs"]) == (
        "missing",
        [],
        [],
    )
    assert recs[1]["response"]["token_ids"] == [20, 21, 3]
    return recs[0]["extra"]["import_error"]


def test_a_short_log_prob_list_is_refused_by_name(tmp_path):
    err = _refusal(tmp_path, dict(A, rollout_log_probs=[-0.1, -0.5]))
    assert err == "rollout_log_probs has 2 values; the response has 3 real tokens padded to 10"
    err = _refusal(tmp_path, dict(A, old_log_probs=[-0.1]))
    assert err.startswith("old_log_probs has 1 values")


def test_lengths_that_disagree_are_refused_by_name(tmp_path):
    assert _refusal(tmp_path, dict(A, response_mask=[1] * 11)) == "response_mask has 11 positions; responses has 10"
    assert "attention_mask must be 0/1 over prompts + responses (16 + 10), got 25" == _refusal(
        tmp_path, dict(A, attention_mask=A["attention_mask"][1:])
    )
    assert "marks padding" in _refusal(tmp_path, dict(A, response_mask=[1, 1, 1, 1] + [0] * 6))
    assert "not right-padded" in _refusal(
        tmp_path, dict(A, attention_mask=A["attention_mask"][:16] + [1, 0, 1] + [0] * 7)
    )
    assert "not left-padded" in _refusal(tmp_path, dict(A, attention_mask=[1] + A["attention_mask"][1:]))
    assert _refusal(tmp_path, dict(A, input_ids=A["input_ids"][::-1])) == "input_ids is not prompts + responses"
    assert "response_mask" in _refusal(tmp_path, {k: v for k, v in A.items() if k != "response_mask"})


def test_without_rollout_log_probs_nothing_is_verifiable(tmp_path, toy):
    bare = {k: v for k, v in A.items() if k != "rollout_log_probs"}  # calculate_log_probs=False
    recs, dst = imported(tmp_path, [bare])
    assert recs[0]["rollout"]["logprobs"] == [None, None, None] and recs[0]["response"]["token_ids"] == [20, 21, 3]
    assert audit_file(dst, tokenizer=toy, mode="merged")["coverage"]["verifiable_policy_tokens"] == 0


def test_bypass_mode_old_log_probs_are_no_trainer_side(tmp_path):
    # verl's rollout-correction bypass mode sets old_log_probs = rollout_log_probs: no recomputation happened
    copy = dict(A, old_log_probs=A["rollout_log_probs"])
    recs, _ = imported(tmp_path, [copy, A])
    assert "trainer" not in recs[0] and recs[0]["extra"]["old_log_probs"] == "rollout_copy"
    assert recs[1]["trainer"]["logprobs"] == [-0.11, -0.51, -0.02] and "old_log_probs" not in recs[1]["extra"]


def test_a_partial_rollout_row_keeps_its_versions_unknown(tmp_path):
    recs, _ = imported(tmp_path, [dict(A, param_version_start=3, param_version_end=5)])
    assert recs[0]["model"]["policy_version"] is None
    assert recs[0]["rollout"]["token_policy_versions"] == [None, None, None]


def test_without_a_declared_task_hash_the_root_call_stays_unverified(tmp_path, toy):
    # verl writes no declared hash: the observed one alone proves nothing about the task (R5)
    bare = {k: v for k, v in A.items() if k != "task_prompt_sha256_declared"}
    recs, dst = imported(tmp_path, [bare, dict(A, traj_uid="t-9", task_prompt_sha256_declared="not a hash")])
    assert [r["prompt"]["task_prompt_sha256_declared"] for r in recs] == [None, None]
    rep = audit_file(dst, tokenizer=toy, mode="merged")
    assert [c["reasons"] for c in rep["calls"]] == [["LINEAGE_UNVERIFIED"]] * 2
