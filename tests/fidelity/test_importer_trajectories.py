"""verl agent-loop outputs, slime samples and SkyRL generator outputs: one policy call per run of model tokens
(mask 1), tool/environment tokens never a response, prompts extended with everything before the run (TITO), the
task text's hash observed; SkyRL's ``rollout_logprobs = None`` (token identity lost) and ``--ids-from text`` stay
unverifiable; after a join the calls are verifiable. Fixtures in the shapes of verl's ``AgentLoopOutput``, slime's
``Sample.to_dict()`` and SkyRL's ``GeneratorOutput``, written for these tests from reading that code."""

from __future__ import annotations

import orjson
import pytest

from workers.fidelity import audit_file
from workers.fidelity.cli import main
from workers.fidelity.importers.trajectories import split_calls
from workers.fidelity.join import join

from .conftest import PROMPT_A, TASK_LIST_FILES
from .helpers import dumps

MESSAGES = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List files"}]
# turn 1: model [20, 21, 3]; tool output [44, 45, 3] (mask 0); turn 2: model [20, 3]
RESP = [20, 21, 3, 44, 45, 3, 20, 3]
MASK = [1, 1, 1, 0, 0, 0, 1, 1]
LPS = [-0.1, -0.5, -0.01, 0.0, 0.0, 0.0, -0.2, -0.02]  # verl writes 0.0 for tool tokens


def verl_output(**over):
    row = {
        "prompt_ids": PROMPT_A,
        "response_ids": RESP,
        "response_mask": MASK,
        "response_logprobs": LPS,
        "routed_experts": None,
        "multi_modal_data": None,
        "reward_score": 1.0,
        "num_turns": 4,
        "metrics": {"generate_sequences": 0.4, "tool_calls": 0.1, "compute_score": 0.0, "num_preempted": -1},
        "extra_fields": {},
        "trajectory_id": "uid-1",
        "raw_prompt": MESSAGES,
        "step": 3,
    }
    row.update(over)
    return row


def slime_sample(**over):
    s = {
        "group_index": 0,
        "index": 5,
        "prompt": MESSAGES,
        "tokens": PROMPT_A + RESP,
        "response": "ls -la ...",
        "response_length": len(RESP),
        "label": "x",
        "reward": 1.0,
        "loss_mask": MASK,
        "weight_versions": ["3", "3"],
        "rollout_log_probs": LPS,
        "rollout_routed_experts": None,
        "status": "completed",
        "metadata": {},
        "train_metadata": None,
        "non_generation_time": 0.0,
    }
    s.update(over)
    return s


def skyrl_batch(logprobs=True):
    return {
        "prompt_token_ids": [PROMPT_A, PROMPT_A],
        "response_ids": [RESP, [20, 3]],
        "rewards": [1.0, 0.0],
        "loss_masks": [MASK, [1, 1]],
        "stop_reasons": ["stop", "length"],
        "rollout_metrics": {},
        "rollout_logprobs": [LPS, [-0.3, -0.4]] if logprobs else None,
        "trajectory_ids": [{"instance_id": "q7", "repetition_id": 0}, {"instance_id": "q7", "repetition_id": 1}],
        "prompts": [MESSAGES, MESSAGES],
    }


def imported(tmp_path, kind, rows, *args):
    src, dst = tmp_path / f"{kind}.jsonl", tmp_path / f"{kind}.fcr.jsonl"
    src.write_bytes(dumps(rows))
    assert (
        main(
            [
                "import",
                kind,
                str(src),
                str(dst),
                "--engine",
                "vllm",
                "--logprobs-mode",
                "processed_logprobs",
                "--generation-config-source",
                "request_only",
                *args,
            ]
        )
        == 0
    )
    return [orjson.loads(x) for x in dst.read_bytes().splitlines()], dst


def test_split_calls():
    assert split_calls(RESP, MASK) == [(0, 3), (6, 8)]
    assert split_calls([1, 2], [0, 0]) == [] and split_calls([1], [1]) == [(0, 1)]


@pytest.mark.parametrize(
    "kind,rows", [("verl", [verl_output()]), ("slime", [slime_sample()]), ("skyrl", [skyrl_batch()])]
)
def test_one_policy_call_per_model_run(tmp_path, kind, rows):
    recs, _ = imported(tmp_path, kind, rows)
    first, second = recs[0], recs[1]
    assert first["response"]["token_ids"] == [20, 21, 3] and second["response"]["token_ids"] == [20, 3]
    assert second["prompt"]["token_ids"] == PROMPT_A + [20, 21, 3, 44, 45, 3]  # tool tokens are prompt, not response
    assert first["rollout"]["logprobs"] == [-0.1, -0.5, -0.01] and second["rollout"]["logprobs"] == [-0.2, -0.02]
    for r in recs[:2]:
        assert (r["role"], r["role_source"], r["response"]["provenance"]) == ("policy", "config", "engine")
        assert r["prompt"]["provenance"] == "engine_input" and r["engine"]["api"] == "generate"
        assert r["prompt"]["task_prompt_sha256_observed"] == TASK_LIST_FILES
        assert "trainer" not in r
    assert [r["call_index"] for r in recs[:2]] == [0, 1] and first["trajectory_id"] == second["trajectory_id"]
    if kind == "slime":
        assert first["model"]["policy_version"] == 3 and first["trajectory_id"] == "0:5"
    if kind == "skyrl":
        assert [r["trajectory_id"] for r in recs] == ["q7_0", "q7_0", "q7_1"]


def test_after_join_the_calls_are_verifiable(tmp_path, toy):
    recs, dst = imported(tmp_path, "verl", [verl_output()])
    rows = [
        {
            "call_id": r["call_id"],
            "logprobs": [v - 0.01 for v in r["rollout"]["logprobs"]],
            "sample_id": "uid-1",
            "loss_mask_used": [1] * len(r["rollout"]["logprobs"]),
            "task_prompt_sha256_declared": TASK_LIST_FILES if r["call_index"] == 0 else None,
        }
        for r in recs
    ]
    (tmp_path / "tr.jsonl").write_bytes(dumps(rows))
    join(dst, tmp_path / "tr.jsonl", tmp_path / "j.jsonl")
    rep = audit_file(tmp_path / "j.jsonl", tokenizer=toy, mode="merged")
    assert rep["headline"] == "100% of policy tokens verifiable (5 of 5)", [c["reasons"] for c in rep["calls"]]
    assert rep["verdict_label"] == "PASS" and rep["closed_failure_violations"] == 0


def test_lost_token_identity_stays_unverifiable(tmp_path, toy):
    recs, dst = imported(tmp_path, "skyrl", [skyrl_batch(logprobs=False)])
    assert {r["response"]["provenance"] for r in recs} == {"retokenized"}
    assert all(v is None for r in recs for v in r["rollout"]["logprobs"])
    recs2, dst2 = imported(tmp_path, "verl", [verl_output()], "--ids-from", "text")
    assert {r["response"]["provenance"] for r in recs2} == {"retokenized"}
    rows = [
        {
            "call_id": r["call_id"],
            "logprobs": [-0.1] * len(r["response"]["token_ids"]),
            "task_prompt_sha256_declared": TASK_LIST_FILES,
        }
        for r in recs2[:1]
    ]
    (tmp_path / "tr.jsonl").write_bytes(dumps(rows))
    join(dst2, tmp_path / "tr.jsonl", tmp_path / "j.jsonl", allow_untrained=True)
    rep = audit_file(tmp_path / "j.jsonl", tokenizer=toy)
    assert rep["coverage"]["verifiable_policy_tokens"] == 0
    assert rep["calls"][0]["primary_reason"] == "RESPONSE_IDS_RETOKENIZED"


def test_bad_lines_become_missing_records(tmp_path):
    recs, dst = imported(tmp_path, "verl", [verl_output(response_mask=[1, 1]), b"nope", verl_output()])
    assert [r["response"]["provenance"] for r in recs[:2]] == ["missing", "missing"]
    assert "mask must be 0/1 per response token (8)" in recs[0]["extra"]["import_error"]
    assert len(recs) == 4
    recs, _ = imported(tmp_path, "slime", [slime_sample(response_length=99)])
    assert "response_length" in recs[0]["extra"]["import_error"]


def test_slime_torch_dump_is_refused_naming_the_format(tmp_path, capsys):
    # slime's --save-debug-rollout-data writes torch.save(...): a zip archive (or, legacy, a pickle) — never read as
    # text lines, never unpickled (#27)
    import pickle
    import zipfile

    zpath = tmp_path / "rollout_0.pt"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"samples": [slime_sample()]}))
    ppath = tmp_path / "legacy.pt"
    ppath.write_bytes(pickle.dumps({"samples": [slime_sample()]}, protocol=2))
    for path, word in ((zpath, "zip archive"), (ppath, "pickle")):
        dst = tmp_path / "out.jsonl"
        assert main(["import", "slime", str(path), str(dst), "--engine", "sglang"]) == 2
        err = capsys.readouterr().err
        assert word in err and "torch.save" in err and "Sample.to_dict()" in err


def test_verl_group_uid_is_not_a_trajectory(tmp_path):
    # verl's ``uid`` is shared by the n samples of one prompt (GRPO groups): two samples with uid "grp-1" were one
    # trajectory, the second sample's first call numbered 2 and its prompt read as a continuation of the first's
    a = {k: v for k, v in verl_output(uid="grp-1").items() if k != "trajectory_id"}
    b = dict(a, response_ids=[20, 3], response_mask=[1, 1], response_logprobs=[-0.3, -0.4])
    recs, _ = imported(tmp_path, "verl", [a, b])
    assert [(r["trajectory_id"], r["call_index"]) for r in recs] == [
        ("verl.jsonl:1/0", 0),
        ("verl.jsonl:1/0", 1),
        ("verl.jsonl:2/0", 0),
    ]
    assert {r["extra"]["group_uid"] for r in recs} == {"grp-1"}
    recs, _ = imported(tmp_path, "verl", [dict(a, traj_uid="t-a"), dict(b, traj_uid="t-b")])
    assert [r["call_id"] for r in recs] == ["t-a#0", "t-a#1", "t-b#0"]


def test_run_parameters_given_to_the_importer_travel_on_every_record(tmp_path, capsys):
    """``--run-config`` / ``--tag``: a rollout dump carries no config of its run, so the importer writes the one it is
    given on every record (docs/fcr.md#run-parameters), where the validator finds it; a bad one writes nothing."""
    from workers.fcr.validate import validate_file

    (tmp_path / "config.json").write_text('{"actor": {"lr": 1e-6}, "algo": "grpo"}')
    recs, _ = imported(tmp_path, "verl", [verl_output()], "--run-config", f"@{tmp_path / 'config.json'}", "--tag", "a")
    assert len(recs) >= 2
    assert all(r["run_config"] == {"actor": {"lr": 1e-6}, "algo": "grpo"} and r["run_tags"] == ["a"] for r in recs)
    summary = validate_file(tmp_path / "verl.fcr.jsonl")
    assert summary["valid"] and summary["run_params"][recs[0]["run_id"]]["run_tags"]["value"] == ["a"]

    src, dst = tmp_path / "again.jsonl", tmp_path / "again.fcr.jsonl"
    src.write_bytes(dumps([verl_output()]))
    assert main(["import", "verl", str(src), str(dst), "--run-config", "[1, 2]"]) == 2
    assert "--run-config: a JSON object" in capsys.readouterr().err and not dst.exists()
