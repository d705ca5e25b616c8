"""Partial rollouts and placeholders (issue #27): a sample generated across weight updates keeps which version
produced each token (never the sample's last version), and a log-prob the importer cannot show is the engine's
(SkyRL's appended EOS with 0.0, ids re-encoded from text) is ``LOGPROB_UNVERIFIED`` whatever the loss mask says.
Fixtures in the shapes of verl's fully-async ``AgentLoopOutput`` (``param_version_start`` / ``_end``), slime's
``Sample.to_dict()`` (``weight_versions``: one string per engine call, or per-call ``{version, abs_start,
abs_end}`` spans) and SkyRL's ``GeneratorOutput``, written for these tests from reading that code."""

from __future__ import annotations

import orjson
import pytest

from workers.fcr import validate_record
from workers.fidelity import audit_file
from workers.fidelity.join import join

from .conftest import PROMPT_A, TASK_LIST_FILES
from .helpers import audit_one, dumps, variant
from .test_importer_trajectories import LPS, MASK, RESP, imported, skyrl_batch, slime_sample, verl_output


def joined(tmp_path, dst, recs, trainer_version=None):
    rows = [
        {
            "call_id": r["call_id"],
            "logprobs": [(v if v is not None else -0.1) - 0.01 for v in r["rollout"]["logprobs"]],
            "task_prompt_sha256_declared": TASK_LIST_FILES if r["call_index"] == 0 else None,
            **({"policy_version": trainer_version} if trainer_version is not None else {}),
        }
        for r in recs
    ]
    (tmp_path / "tr.jsonl").write_bytes(dumps(rows))
    join(dst, tmp_path / "tr.jsonl", tmp_path / "j.jsonl")
    return tmp_path / "j.jsonl"


def spans_of(call):
    return [(s["start"], s["end"], s["verifiable"], s["reasons"]) for s in call["spans"]]


# ----------------------------------------------------------------------------- per-token policy versions
def test_verl_fully_async_partial_rollout_is_never_its_last_version(tmp_path, toy):
    row = verl_output(param_version_start=3, param_version_end=5, extra_fields={})
    recs, dst = imported(tmp_path, "verl", [row])
    for r in recs:
        assert r["model"]["policy_version"] is None  # was 5: the last version
        assert r["rollout"]["token_policy_versions"] == [None] * len(r["response"]["token_ids"])
        assert r["extra"]["policy_versions"] == [3, 5]
        assert not [i for i in validate_record(r) if i.severity == "error"]
    rep = audit_file(joined(tmp_path, dst, recs, trainer_version=5), tokenizer=toy)
    assert rep["coverage"]["verifiable_policy_tokens"] == 0
    assert {c["primary_reason"] for c in rep["calls"]} == {"MIXED_POLICY_VERSION"}
    # the same sample in extra_fields (verl's agent loops keep them there), and one that stayed on one version
    recs, _ = imported(tmp_path, "verl", [verl_output(extra_fields={"param_version_start": 3, "param_version_end": 5})])
    assert recs[0]["model"]["policy_version"] is None and recs[0]["rollout"]["token_policy_versions"]
    recs, dst = imported(tmp_path, "verl", [verl_output(param_version_start=4, param_version_end=4)])
    assert [r["model"]["policy_version"] for r in recs] == [4, 4]
    assert all("token_policy_versions" not in r["rollout"] for r in recs)


def test_verl_min_max_global_steps(tmp_path, toy):
    # verl's agent loops keep the versions of a sample's first and last tokens as extra_fields min_global_steps /
    # max_global_steps: 3 → 5 is a partial rollout (it imported with no version, so no rule saw it)
    recs, dst = imported(tmp_path, "verl", [verl_output(extra_fields={"min_global_steps": 3, "max_global_steps": 5})])
    assert [r["model"]["policy_version"] for r in recs] == [None, None]
    assert recs[0]["rollout"]["token_policy_versions"] == [None] * 3 and recs[0]["extra"]["policy_versions"] == [3, 5]
    rep = audit_file(joined(tmp_path, dst, recs, trainer_version=5), tokenizer=toy)
    assert rep["coverage"]["verifiable_policy_tokens"] == 0
    recs, _ = imported(tmp_path, "verl", [verl_output(extra_fields={"min_global_steps": 4, "max_global_steps": 4})])
    assert [r["model"]["policy_version"] for r in recs] == [4, 4]


def test_verl_sample_with_one_version_end_unknown(tmp_path, toy):
    # param_version_end left None (seen in verl's fully-async partial rollouts): the sample may have been resumed
    # after an update, so version 3 is not every token's. It imported as version 3 and was verifiable.
    recs, dst = imported(
        tmp_path, "verl", [verl_output(extra_fields={"param_version_start": 3, "param_version_end": None})]
    )
    assert [r["model"]["policy_version"] for r in recs] == [None, None]
    assert recs[0]["rollout"]["token_policy_versions"] == [None] * 3 and recs[0]["extra"]["policy_versions"] == [
        3,
        None,
    ]
    rep = audit_file(joined(tmp_path, dst, recs, trainer_version=5), tokenizer=toy)
    assert rep["coverage"]["verifiable_policy_tokens"] == 0
    assert {c["primary_reason"] for c in rep["calls"]} == {"MIXED_POLICY_VERSION"}


def test_verl_partial_agent_loop_log_probs_field(tmp_path):
    row = verl_output(response_logprobs=None, log_probs=LPS)  # the partial agent loops name it ``log_probs``
    recs, _ = imported(tmp_path, "verl", [row])
    assert recs[0]["rollout"]["logprobs"] == LPS[:3]


def test_slime_legacy_weight_versions_across_updates(tmp_path, toy):
    recs, dst = imported(tmp_path, "slime", [slime_sample(weight_versions=["3", "4", "5"])])
    assert [r["model"]["policy_version"] for r in recs] == [None, None]
    assert recs[0]["rollout"]["token_policy_versions"] == [None, None, None]
    rep = audit_file(joined(tmp_path, dst, recs, trainer_version=5), tokenizer=toy)
    assert rep["coverage"]["verifiable_policy_tokens"] == 0
    recs, _ = imported(tmp_path, "slime", [slime_sample(weight_versions=["5", "5"])])
    assert [r["model"]["policy_version"] for r in recs] == [5, 5]


def test_slime_weight_version_spans_give_each_token_its_version(tmp_path, toy):
    P = len(PROMPT_A)
    # call 1 (response 0..3) was sampled by versions 3 (first two tokens) and 4; call 2 (6..8) by 5
    wv = [
        [{"version": "3", "abs_start": P, "abs_end": P + 2}],
        [{"version": "4", "abs_start": P + 2, "abs_end": P + 3}],
        [{"version": "5", "abs_start": P + 6, "abs_end": P + 8}],
    ]
    recs, dst = imported(tmp_path, "slime", [slime_sample(weight_versions=wv)])
    assert recs[0]["model"]["policy_version"] is None and recs[0]["rollout"]["token_policy_versions"] == [3, 3, 4]
    assert recs[1]["model"]["policy_version"] == 5 and "token_policy_versions" not in recs[1]["rollout"]
    rep = audit_file(joined(tmp_path, dst, recs, trainer_version=5), tokenizer=toy, mode="merged")
    first, second = rep["calls"]
    assert spans_of(first)[0] == (0, 2, False, ["MIXED_POLICY_VERSION"])
    assert spans_of(first)[1][:2] == (2, 3)
    assert second["verifiable_tokens"] == 2
    # with a staleness bound, each token is judged by its own version: 5 − 3 > 1, 5 − 4 ≤ 1
    rep = audit_file(tmp_path / "j.jsonl", tokenizer=toy, mode="merged", max_staleness=1)
    assert spans_of(rep["calls"][0])[0] == (0, 2, False, ["STALE_ROLLOUT", "MIXED_POLICY_VERSION"])
    assert rep["calls"][1]["verifiable_tokens"] == 2


def test_staleness_is_per_token_not_the_last_version(A):
    # model.policy_version says 7 (the last), but every token was sampled by 5: the trainer at 7 is 2 versions ahead
    rec = variant(A, **{"rollout.token_policy_versions": [5, 5, 5], "trainer.policy_version": 7})
    assert audit_one(rec, max_staleness=1)["reasons"] == ["STALE_ROLLOUT"]
    assert audit_one(rec, max_staleness=2)["reasons"] == []
    unknown = variant(A, **{"rollout.token_policy_versions": [None, 7, 7]})
    assert spans_of(audit_one(unknown)) == [(0, 1, False, ["MIXED_POLICY_VERSION"]), (1, 3, True, [])]
    assert spans_of(audit_one(unknown, max_staleness=1))[0] == (
        0,
        1,
        False,
        ["MIXED_POLICY_VERSION", "R8_NOT_EVALUABLE"],
    )


# ----------------------------------------------------------------------------- proof, not masks
def test_skyrl_appended_eos_placeholder_is_unverifiable(tmp_path, toy):
    batch = skyrl_batch()
    batch["response_ids"][0] = RESP + [3]  # the appended EOS: loss mask 1, rollout log-prob 0.0
    batch["loss_masks"][0] = MASK + [1]
    batch["rollout_logprobs"][0] = LPS + [0.0]
    recs, dst = imported(tmp_path, "skyrl", [batch])
    assert recs[1]["rollout"]["logprob_unverified"] == [[2, 3, "placeholder"]]
    assert "logprob_unverified" not in recs[2]["rollout"]  # stopped for length: nothing appended
    rep = audit_file(joined(tmp_path, dst, recs), tokenizer=toy)
    second = rep["calls"][1]
    assert spans_of(second)[-1][:3] == (2, 3, False) and "LOGPROB_UNVERIFIED" in spans_of(second)[-1][3]
    assert second["logprob_unverified"] == ["placeholder"]
    assert rep["calls"][2]["verifiable_tokens"] == 2


def test_skyrl_reencoded_actions_are_unverifiable(tmp_path, toy):
    batch = skyrl_batch()
    batch["env_metrics"] = [{"postprocessed_action": "ls -la"}, {}]
    recs, dst = imported(tmp_path, "skyrl", [batch])
    first = recs[0]
    assert first["response"]["provenance"] == "retokenized"
    assert first["rollout"]["logprob_unverified"] == [[0, 3, "reencoded"]]
    assert recs[2]["response"]["provenance"] == "engine"
    rep = audit_file(joined(tmp_path, dst, recs), tokenizer=toy)
    assert rep["calls"][0]["verifiable_tokens"] == 0 and rep["calls"][1]["verifiable_tokens"] == 0
    assert "LOGPROB_UNVERIFIED" in rep["calls"][0]["reasons"]


def test_a_missing_mask_is_not_all_model_tokens(tmp_path, toy):
    # verl's response_mask and SkyRL's loss_masks are the only record of which response tokens a tool or the
    # environment inserted (their rollout log-prob is a 0.0 stand-in). Without them the tool output [44, 45, 3]
    # was read as model tokens: one call of 8 tokens, all verifiable after a join. It is refused, named.
    row = verl_output(param_version=4)
    del row["response_mask"]
    batch = skyrl_batch()
    del batch["loss_masks"]
    for kind, line in (("verl", row), ("skyrl", batch)):
        recs, dst = imported(tmp_path, kind, [line])
        assert all(r["response"]["provenance"] == "missing" and not r["response"]["token_ids"] for r in recs)
        assert all("mask" in r["extra"]["import_error"] for r in recs), recs[0]["extra"]
        rep = audit_file(joined(tmp_path, dst, recs), tokenizer=toy)
        assert rep["coverage"]["verifiable_policy_tokens"] == 0
    # slime's Sample says loss_mask None = every response token is the model's (single-turn): still imported
    recs, _ = imported(
        tmp_path,
        "slime",
        [slime_sample(loss_mask=None, tokens=PROMPT_A + [20, 21, 3], response_length=3, rollout_log_probs=LPS[:3])],
    )
    assert [r["response"]["token_ids"] for r in recs] == [[20, 21, 3]]


@pytest.mark.parametrize(
    "spans,ok",
    [
        ([[0, 1, "placeholder"]], True),
        ([[0, 3, "reencoded"]], True),
        ([[0, 4, "padded"]], False),
        ([[1, 1, "padded"]], False),
        ([[0, 1, "mask"]], False),
        ([[0, 1]], False),
        ("x", False),
        ([[0, 1, ["placeholder"]]], False),
    ],
)
def test_validator_logprob_unverified_spans(A, spans, ok):
    issues = [i for i in validate_record(variant(A, **{"rollout.logprob_unverified": spans})) if i.severity == "error"]
    assert (not issues) == ok, issues
    if not ok:
        assert issues[0].field.startswith("rollout.logprob_unverified")


def test_validator_policy_versions_may_be_null(A):
    assert not validate_record(variant(A, **{"rollout.token_policy_versions": [None, 3, 3]}))
    bad = validate_record(variant(A, **{"rollout.token_policy_versions": [None, "3", 3]}))
    assert bad and bad[0].field == "rollout.token_policy_versions[1]"


def test_a_mask_is_not_evidence(A):
    rec = variant(A, **{"rollout.logprob_unverified": [[2, 3, "placeholder"]], "trainer.loss_mask_used": [1, 1, 1]})
    c = audit_one(rec)
    assert spans_of(c)[-1] == (2, 3, False, ["LOGPROB_UNVERIFIED"]) and c["verifiable_tokens"] == 2


def test_imported_records_round_trip(tmp_path):
    recs, dst = imported(tmp_path, "verl", [verl_output(param_version_start=3, param_version_end=5)])
    assert orjson.loads(dst.read_bytes().splitlines()[0]) == recs[0]
