"""NeMo RL step dumps (``train_data_step{N}.jsonl``: one sample per line with ``token_ids``, ``input_lengths``,
``token_mask``, ``sample_mask``, and per column the engine's ``generation_logprobs`` and the trainer's
``prev_logprobs``; fixture written for this test from reading NeMo RL's GRPO loop, not captured): both sides are
imported at once, one call per run of model tokens, the tool turn is prompt, padding is dropped, an exact 0.0 on a
model token (NeMo RL's stand-in where the engine reported nothing) is never verifiable (#27)."""

from __future__ import annotations

import orjson

from workers.fcr import validate_file
from workers.fidelity import audit_file
from workers.fidelity.cli import main

from .conftest import PROMPT_A
from .helpers import dumps

RESP = [20, 21, 3, 44, 45, 3, 20, 3]
MASK = [1, 1, 1, 0, 0, 0, 1, 1]
GEN = [-0.1, -0.5, -0.01, 0.0, 0.0, 0.0, -0.2, -0.02]


def sample(gen=GEN, sample_mask=1.0, pad=3):
    P = len(PROMPT_A)
    ids = PROMPT_A + RESP + [0] * pad
    n = P + len(RESP)
    return {
        "content": [{"role": "user", "content": "List files"}],
        "rewards": 1.0,
        "input_lengths": n,
        "token_ids": ids,
        "token_mask": [0] * P + MASK + [0] * pad,
        "sample_mask": sample_mask,
        "generation_logprobs": [0.0] * P + list(gen) + [0.0] * pad,
        "prev_logprobs": [-1.0] * P + [v - 0.01 if m else -3.0 for v, m in zip(gen, MASK)] + [-7.0] * pad,
    }


def imported(tmp_path, rows):
    src, dst = tmp_path / "train_data_step12.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(rows))
    assert (
        main(
            [
                "import",
                "nemo-rl",
                str(src),
                str(dst),
                "--engine",
                "vllm",
                "--logprobs-mode",
                "processed_logprobs",
                "--generation-config-source",
                "request_only",
            ]
        )
        == 0
    )
    return [orjson.loads(x) for x in dst.read_bytes().splitlines()], dst


def test_both_sides_from_one_record(tmp_path, toy):
    recs, dst = imported(tmp_path, [sample(), sample(sample_mask=0.0)])
    a, b = recs[0], recs[1]
    assert (a["step"], a["role"], a["response"]["token_ids"], b["response"]["token_ids"]) == (
        12,
        "policy",
        [20, 21, 3],
        [20, 3],
    )
    assert b["prompt"]["token_ids"] == PROMPT_A + [20, 21, 3, 44, 45, 3]  # the tool turn is prompt
    assert a["rollout"]["logprobs"] == [-0.1, -0.5, -0.01]
    assert a["trainer"]["logprobs"] == [-0.11, -0.51, -0.02] and a["trainer"]["loss_mask_used"] == [1, 1, 1]
    assert a["trainer"]["sample_id"] == b["trainer"]["sample_id"]
    assert recs[2]["trainer"]["loss_mask_used"] == [0, 0, 0]  # sample_mask 0: not trained
    assert validate_file(dst)["valid"]
    rep = audit_file(dst, tokenizer=toy, mode="merged")
    # ids and both log-prob sides hold; the root call stays LINEAGE_UNVERIFIED (no task hash is declared)
    assert [c["reasons"] for c in rep["calls"][:2]] == [["LINEAGE_UNVERIFIED"], []]
    assert rep["calls"][1]["verifiable_tokens"] == 2 and rep["closed_failure_violations"] == 3


def test_zero_on_a_model_token_is_a_stand_in(tmp_path, toy):
    gen = list(GEN)
    gen[1] = 0.0  # the engine reported nothing for this model token; NeMo RL wrote 0
    recs, _ = imported(tmp_path, [sample(gen=gen)])
    assert recs[0]["rollout"]["logprob_unverified"] == [[1, 2, "not_reported"]]
    assert "logprob_unverified" not in recs[1]["rollout"]


def test_inconsistent_dump_is_a_missing_record(tmp_path):
    bad = sample()
    bad["prev_logprobs"] = bad["prev_logprobs"][:3]
    recs, _ = imported(tmp_path, [bad])
    assert recs[0]["response"]["provenance"] == "missing" and "prev_logprobs" in recs[0]["extra"]["import_error"]
