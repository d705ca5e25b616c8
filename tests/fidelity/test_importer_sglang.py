"""SGLang /generate importer on records in the shape of SGLang's tokenizer manager output (``text``,
``output_ids``, ``meta_info.output_token_logprobs`` as ``[logprob, id, text]``, ``output_top_logprobs``,
``weight_version``): plain, ``n > 1``, streaming (accumulated and incremental ids), error bodies; after a join the
call is verifiable. Fixtures written for these tests from reading that code."""

from __future__ import annotations

import copy

import orjson
import pytest

from workers.fidelity import audit_file
from workers.fidelity.cli import main
from workers.fidelity.join import join

from .conftest import PROMPT_A, TASK_LIST_FILES
from .helpers import dumps

LPS = [-0.105361, -0.510826, -0.01005]
IDS = [20, 21, 3]
TOPS = [
    [[-0.105361, 20, None], [-2.995732, 24, None]],
    [[-0.510826, 21, None], [-1.203973, 24, None]],
    [[-0.01005, 3, None], [-5.298317, 22, None]],
]


def output(rid="a1b2", ids=IDS, lps=LPS, tops=TOPS, n_ids=None):
    return {
        "text": "ls -la<|end|>",
        "output_ids": list(ids) if n_ids is None else list(ids[:n_ids]),
        "meta_info": {
            "id": rid,
            "finish_reason": {"type": "stop", "matched": 3},
            "prompt_tokens": len(PROMPT_A),
            "weight_version": "7",
            "total_retractions": 0,
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "input_token_logprobs": [[None, PROMPT_A[0], None]] + [[-1.0, t, None] for t in PROMPT_A[1:]],
            "output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, ids)],
            "output_top_logprobs": tops,
        },
    }


def exchange(response, **req):
    request = {
        "input_ids": PROMPT_A,
        "sampling_params": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64},
        "return_logprob": True,
        "top_logprobs_num": 2,
        "logprob_start_len": 0,
    }
    request.update(req)
    return {
        "request": request,
        "response": response,
        "meta": {
            "trajectory_id": "tS",
            "step": 4,
            "task_prompt_sha256_declared": TASK_LIST_FILES,
            "headers": {"X-FCR-Call-Role": "policy"},
        },
    }


def run(tmp_path, exchanges, *args):
    src, dst = tmp_path / "sg.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(exchanges))
    assert (
        main(
            [
                "import",
                "sglang",
                str(src),
                str(dst),
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


def test_generate_record_and_join_to_verifiable(tmp_path, toy):
    (r,), dst = run(tmp_path, [exchange(output(), text="List files")], "--toy-vocab", str(_vocab(tmp_path)))
    # the text prompt gives the observed task hash (as for completions); token-only requests have none, so their
    # root call stays LINEAGE_UNVERIFIED (send the text, or use a trajectory importer with the messages)
    assert r["prompt"]["task_prompt_sha256_observed"] == TASK_LIST_FILES
    assert (r["engine"]["name"], r["engine"]["api"], r["chat_template"]) == ("sglang", "generate", None)
    assert r["prompt"] == {**r["prompt"], "token_ids": PROMPT_A, "provenance": "engine_input"}
    assert r["response"]["token_ids"] == IDS and r["response"]["provenance"] == "engine"
    assert r["response"]["text"] == "ls -la<|end|>" and r["response"]["usage_completion_tokens"] == 3
    assert r["response"]["finish_reason"] == "stop" and r["model"]["policy_version"] == 7
    assert r["rollout"]["logprobs"] == LPS
    assert r["rollout"]["top_k"] == [
        [[20, -0.105361], [24, -2.995732]],
        [[21, -0.510826], [24, -1.203973]],
        [[3, -0.01005], [22, -5.298317]],
    ]
    assert r["sampling"]["max_tokens"] == 64 and r["call_id"] == "a1b2"
    (tmp_path / "tr.jsonl").write_bytes(
        dumps(
            [
                {
                    "call_id": "a1b2",
                    "logprobs": [-0.12, -0.69, -0.01],
                    "top_k": [[[20, -0.12], [24, -2.8]], [[21, -0.69], [24, -0.9]], [[3, -0.01], [22, -5.1]]],
                }
            ]
        )
    )
    join(dst, tmp_path / "tr.jsonl", tmp_path / "j.jsonl")
    rep = audit_file(tmp_path / "j.jsonl", tokenizer=toy)
    assert rep["headline"] == "100% of policy tokens verifiable (3 of 3)", rep["calls"][0]["reasons"]
    assert rep["calls"][0]["certificate"]["invalid"] == 0


def _vocab(tmp_path):
    from .conftest import TOY_VOCAB_JSON

    p = tmp_path / "vocab.json"
    p.write_text(TOY_VOCAB_JSON)
    return p


def test_prompt_from_input_token_logprobs_and_text_prompt(tmp_path):
    ex = exchange(output(), text="You are an agent.")
    del ex["request"]["input_ids"]
    (r,), _ = run(tmp_path, [ex])
    assert r["prompt"]["token_ids"] == PROMPT_A and r["prompt"]["provenance"] == "engine"
    ex["response"]["meta_info"]["input_token_logprobs"] = ex["response"]["meta_info"]["input_token_logprobs"][3:]
    (r,), _ = run(tmp_path, [ex])  # logprob_start_len > 0: the prompt is not fully covered
    assert r["prompt"]["provenance"] == "missing"


def test_n2_outputs_and_error_body(tmp_path):
    second = output(rid="c3d4", ids=[20, 24, 3], lps=[-0.1, -2.9, -0.02], tops=None)
    second["meta_info"].pop("output_top_logprobs")
    err = exchange({"error": {"message": "The input is too long", "type": "BadRequestError", "code": 400}})
    err["meta"]["call_index"] = 5
    recs, dst = run(tmp_path, [exchange([output(), second], sampling_params={"n": 2}), err])
    assert [r["call_id"] for r in recs[:2]] == ["a1b2", "c3d4"]
    assert recs[1]["response"]["token_ids"] == [20, 24, 3] and "top_k" not in recs[1]["rollout"]
    bad = recs[2]
    assert (bad["role"], bad["role_source"], bad["engine"]["name"], bad["call_index"]) == (
        "policy",
        "header",
        "sglang",
        5,
    )
    assert "too long" in bad["extra"]["import_error"] and bad["response"]["provenance"] == "missing"


@pytest.mark.parametrize("incremental", [False, True])
def test_streaming_accumulated_and_incremental(tmp_path, incremental):
    chunks = []
    for t in range(1, 4):
        c = output(n_ids=t)
        mi = c["meta_info"]
        mi["output_token_logprobs"] = mi["output_token_logprobs"][:t]
        mi["output_top_logprobs"] = mi["output_top_logprobs"][:t]
        mi["finish_reason"] = {"type": "stop"} if t == 3 else None
        if incremental:
            c["output_ids"] = [IDS[t - 1]]
        chunks.append(c)
    (r,), _ = run(tmp_path, [exchange(chunks, stream=True)])
    (plain,), _ = run(tmp_path, [exchange(output())])
    for k in ("prompt", "response", "rollout", "call_id"):
        assert r[k] == plain[k], k


def test_mismatched_ids_drop_logprobs(tmp_path):
    o = output()
    o["meta_info"]["output_token_logprobs"][1][1] = 99  # ids in the logprob entries disagree with output_ids
    (r,), _ = run(tmp_path, [exchange(copy.deepcopy(o))])
    assert r["rollout"]["logprobs"] == [None, None, None] and r["extra"]["logprobs_unaligned"] is True


def test_incremental_streaming_output_concatenates_every_chunk(tmp_path):
    # --incremental-streaming-output: each chunk carries only its new ids, text and output log-probs (#27)
    texts = ["ls", " -la", "<|end|>"]
    chunks = []
    for t in range(3):
        c = output()
        c["output_ids"], c["text"] = [IDS[t]], texts[t]
        mi = c["meta_info"]
        mi["output_token_logprobs"] = mi["output_token_logprobs"][t : t + 1]
        mi["output_top_logprobs"] = mi["output_top_logprobs"][t : t + 1]
        mi["completion_tokens"] = t + 1
        mi["finish_reason"] = {"type": "stop"} if t == 2 else None
        chunks.append(c)
    (r,), _ = run(tmp_path, [exchange(chunks, stream=True)])
    (plain,), _ = run(tmp_path, [exchange(output())])
    for k in ("prompt", "response", "rollout", "call_id"):
        assert r[k] == plain[k], k
    assert r["response"]["text"] == "ls -la<|end|>"


def test_return_prompt_token_ids_keeps_the_engine_prompt(tmp_path):
    out = output()
    out["meta_info"].pop("input_token_logprobs")  # no prompt log-probs asked for: only the flag gives the ids
    out["prompt_token_ids"] = PROMPT_A
    (r,), _ = run(
        tmp_path, [exchange(out, input_ids=None, text="List files", return_prompt_token_ids=True, logprob_start_len=-1)]
    )
    assert (r["prompt"]["token_ids"], r["prompt"]["provenance"]) == (PROMPT_A, "engine")
    out = output()
    out["meta_info"].pop("input_token_logprobs")
    (r,), _ = run(tmp_path, [exchange(out, input_ids=None, text="List files", logprob_start_len=-1)])
    assert r["prompt"]["provenance"] == "missing"  # without the flag the prompt ids are not known


def test_weight_version_spans_give_each_token_its_version(tmp_path):
    # an engine that updated weights mid-request reports output-relative spans (meta_info.weight_versions): the
    # tokens keep their own versions, never the request's last weight_version (#27)
    out = output()
    out["meta_info"]["weight_version"] = "8"
    out["meta_info"]["weight_versions"] = [
        {"version": "7", "start": 0, "end": 2},
        {"version": "8", "start": 2, "end": 3},
    ]
    (r,), _ = run(tmp_path, [exchange(out)])
    assert r["model"]["policy_version"] is None and r["rollout"]["token_policy_versions"] == [7, 7, 8]
    out["meta_info"]["weight_versions"] = [{"version": "8", "start": 0, "end": 3}]
    (r,), _ = run(tmp_path, [exchange(out)])
    assert r["model"]["policy_version"] == 8 and "token_policy_versions" not in r["rollout"]
