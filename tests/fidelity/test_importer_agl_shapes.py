"""Agent Lightning importers on records in the shapes of Agent Lightning's current code (adapter/triplet.py: agent
names from attributes, reward spans, LLM-proxy spans; server/routes/events.py: v1 events, ``?format=triplet``;
types.Triplet). Fixtures written for these tests from reading that code."""

from __future__ import annotations

import json

import orjson

from workers.fidelity import audit_file
from workers.fidelity.cli import main
from workers.fidelity.importers import import_agl, import_agl_events
from workers.fidelity.join import join

from .conftest import PROMPT_A
from .helpers import dumps
from .test_importers import chat_exchange

CONTENT = [
    {
        "token": f"token_id:{i}",
        "logprob": lp,
        "bytes": [],
        "top_logprobs": [
            {"token": f"token_id:{i}", "logprob": lp, "bytes": []},
            {"token": "token_id:24", "logprob": -3.5, "bytes": []},
        ],
    }
    for i, lp in ((20, -0.105361), (21, -0.510826), (3, -0.01005))
]


def span(sid, parent, name, seq, **attrs):
    return {
        "rollout_id": "ro-1",
        "attempt_id": "at-1",
        "trace_id": "tr",
        "span_id": sid,
        "parent_id": parent,
        "name": name,
        "sequence_id": seq,
        "start_time": float(seq),
        "end_time": float(seq) + 0.5,
        "attributes": attrs,
    }


def proxy_attrs(resp_id, ids, content=CONTENT):
    # the LLM proxy's raw_gen_ai_request span: Python-repr strings, choices carry token_ids and logprobs
    return {
        "llm.hosted_vllm.id": resp_id,
        "llm.hosted_vllm.model": "toy-policy",
        "llm.hosted_vllm.prompt_token_ids": repr(PROMPT_A),
        "llm.hosted_vllm.choices": repr(
            [
                {
                    "finish_reason": "stop",
                    "index": 0,
                    "token_ids": ids,
                    "message": {"role": "assistant", "content": "x"},
                    "logprobs": {"content": content},
                }
            ]
        ),
    }


def trace():
    return [
        span("root", None, "agent_run", 0),
        span("a-main", "root", "agent", 1, **{"agent.name": "Assistant"}),  # OpenAI Agents SDK
        span("llm-1", "a-main", "raw_gen_ai_request", 2, **proxy_attrs("chatcmpl-1", [20, 21, 3])),
        span("a-sum", "a-main", "agent", 3, **{"agent.name": "Summarizer"}),  # nested helper agent
        span("llm-2", "a-sum", "raw_gen_ai_request", 4, **proxy_attrs("chatcmpl-2", [20, 21, 3])),
        span("op", "a-main", "summarize_tool", 5, **{"agentops.span.kind": "agent", "operation.name": "Assistant"}),
        span("rw", "root", "agentlightning.operation", 6, **{"agentlightning.operation.name": "reward"}),
        span("llm-3", "rw", "raw_gen_ai_request", 7, **proxy_attrs("chatcmpl-3", [20, 21, 3])),  # an LLM judge
    ]


def test_agent_match_uses_the_agent_name_agl_derives(tmp_path, toy):
    src, dst = tmp_path / "spans.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(trace()))
    import_agl(src, dst, tokenizer=toy, agent_match=r"^Assistant$", logprobs_mode="processed_logprobs")
    recs = {r["call_id"]: r for r in map(orjson.loads, dst.read_bytes().splitlines())}
    assert (recs["chatcmpl-1"]["role"], recs["chatcmpl-1"]["role_source"]) == ("policy", "config")
    # the summariser nested inside the trained agent is not promoted (the nearest agent decides)
    assert (recs["chatcmpl-2"]["role"], recs["chatcmpl-2"]["inferred_purpose"]) == ("unknown", "agent:Summarizer")
    assert (recs["chatcmpl-3"]["role"], recs["chatcmpl-3"]["purpose"]) == ("background", "reward")
    # span names alone no longer make an agent: matching the name "agent" finds nothing
    import_agl(src, dst, tokenizer=toy, agent_match=r"^agent$")
    assert {r["role"] for r in map(orjson.loads, dst.read_bytes().splitlines())} == {"unknown", "background"}


def test_proxy_span_logprobs_are_kept(tmp_path, toy):
    src, dst = tmp_path / "spans.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(trace()))
    import_agl(src, dst, tokenizer=toy, agent_match=r"^Assistant$")
    r = next(r for r in map(orjson.loads, dst.read_bytes().splitlines()) if r["call_id"] == "chatcmpl-1")
    assert r["rollout"]["logprobs"] == [-0.105361, -0.510826, -0.01005]
    assert r["rollout"]["top_k"] == [
        [[20, -0.105361], [24, -3.5]],
        [[21, -0.510826], [24, -3.5]],
        [[3, -0.01005], [24, -3.5]],
    ]
    assert r["prompt"]["token_ids"] == PROMPT_A and r["response"]["token_ids"] == [20, 21, 3]


def v1_events():
    ex = chat_exchange()
    full = {
        "event_type": "model_request",
        "rollout_id": "ro-9",
        "attempt_id": "at-1",
        "timestamp": 1.0,
        "data": {
            "request": ex["request"],
            "response": ex["response"],
            "server": {"model": "toy-policy", "endpoint": "http://h:8000/v1", "version": 3},
        },
    }
    reward = {
        "event_type": "reward",
        "rollout_id": "ro-9",
        "attempt_id": "at-1",
        "timestamp": 2.0,
        "data": {"value": 1.0, "source": "judge"},
    }
    other = {"event_type": "rollout_status", "rollout_id": "ro-9", "attempt_id": "at-1", "data": {"status": "done"}}
    trimmed = {
        "event_type": "model_request",
        "rollout_id": "ro-9",
        "attempt_id": "at-1",
        "timestamp": 3.0,
        "data": {
            "prompt_token_ids": PROMPT_A + [20, 21, 3, 1],
            "response_token_ids": [44, 3],
            "response_log_probs": [-0.3, -0.02],
            "server": {"model": "toy-policy", "version": 3},
        },
    }
    failed = {
        "event_type": "model_request",
        "rollout_id": "ro-9",
        "attempt_id": "at-1",
        "timestamp": 4.0,
        "data": {
            "prompt_token_ids": [],
            "response_token_ids": [],
            "response_log_probs": None,
            "server": {"model": "toy-policy", "version": 3},
            "http_status": 400,
            "error": {"message": "context too long"},
        },
    }
    return [full, reward, other, trimmed, failed]


def test_v1_events_rewards_skipped_roles_by_configuration(tmp_path, toy):
    src, dst = tmp_path / "events.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(v1_events()))
    stats = import_agl_events(
        src,
        dst,
        tokenizer=toy,
        role="policy",
        logprobs_mode="processed_logprobs",
        generation_config_source="request_only",
    )
    assert stats["events_skipped"] == {"reward": 1, "rollout_status": 1} and stats["records"] == 3
    full, trimmed, failed = map(orjson.loads, dst.read_bytes().splitlines())
    assert full["model"]["policy_version"] == 3 and full["response"]["token_ids"] == [20, 21, 3]
    assert (full["role"], full["role_source"]) == ("policy", "config")  # events log no role header
    assert (trimmed["role"], trimmed["role_source"]) == ("policy", "config")
    assert trimmed["response"]["provenance"] == "engine" and trimmed["rollout"]["logprobs"] == [-0.3, -0.02]
    assert trimmed["trajectory_id"] == "ro-9:at-1" and trimmed["call_index"] == 1
    assert failed["response"]["provenance"] == "missing" and failed["role"] == "policy"
    assert "context too long" in failed["extra"]["import_error"]
    # the vLLM importer no longer turns the reward event into a failed model call either
    from workers.fidelity.importers import import_vllm

    assert import_vllm(src, tmp_path / "v.jsonl")["events_skipped"] == 2


def test_triplet_objects_with_agent_match_and_join(tmp_path, toy):
    triplets = [
        {
            "rollout_id": "ro-5",
            "attempt_id": "at-1",
            "prompt": {"token_ids": PROMPT_A, "raw_content": [], "image_urls": []},
            "response": {"token_ids": [20, 21, 3], "raw_content": [], "logprobs": CONTENT},
            "reward": 0.5,
            "metadata": {
                "response_id": "chatcmpl-t1",
                "agent_name": "Assistant",
                "request": {"model": "toy-policy", "temperature": 1.0},
            },
        },
        {
            "rollout_id": "ro-5",
            "attempt_id": "at-1",
            "prompt": {"token_ids": [0, 33], "raw_content": []},
            "response": {"token_ids": [35, 3], "raw_content": []},
            "reward": None,
            "metadata": {"response_id": "chatcmpl-t2", "agent_name": "Titler"},
        },
    ]
    src, dst = tmp_path / "triplets.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(triplets))
    assert (
        main(
            [
                "import",
                "agl-events",
                str(src),
                str(dst),
                "--agent-match",
                "^Assistant$",
                "--logprobs-mode",
                "processed_logprobs",
                "--generation-config-source",
                "request_only",
            ]
        )
        == 0
    )
    a, b = map(orjson.loads, dst.read_bytes().splitlines())
    assert (a["role"], a["call_id"], a["rollout"]["logprobs"]) == (
        "policy",
        "chatcmpl-t1",
        [-0.105361, -0.510826, -0.01005],
    )
    assert (b["role"], b["inferred_purpose"], b["rollout"]["logprobs"]) == ("unknown", "agent:Titler", [None, None])
    (tmp_path / "tr.jsonl").write_bytes(
        dumps([{"call_id": "chatcmpl-t1", "logprobs": [-0.11, -0.5, -0.01], "task_prompt_sha256_declared": None}])
    )
    join(dst, tmp_path / "tr.jsonl", tmp_path / "j.jsonl")
    call = audit_file(tmp_path / "j.jsonl", tokenizer=toy)["calls"][0]
    # ids, log-probs and role hold; what stays unverifiable is the lineage (no task hash was declared)
    assert call["reasons"] == ["LINEAGE_UNVERIFIED"], call["reasons"]
    json.dumps(call)


def test_rollout_manager_triplets_keep_logprobs_and_version(tmp_path):
    # a Triplet whose response holds the sampled log-probs as a plain list and names its weights version, and AGL's
    # adapter TokensTriplet {observation, completion: {token_ids, logprobs}, reward, done, raw_call} (#27)
    plain = {
        "rollout_id": "ro-6",
        "attempt_id": "at-1",
        "prompt": {"token_ids": PROMPT_A, "raw_content": []},
        "response": {"token_ids": [20, 21, 3], "raw_content": [], "logprobs": [-0.1, -0.5, -0.01]},
        "reward": 1.0,
        "metadata": {"response_id": "chatcmpl-p1", "agent_name": "Assistant", "model_version": "4"},
    }
    tokens = {
        "rollout_id": "ro-6",
        "attempt_id": "at-1",
        "observation": {"token_ids": PROMPT_A, "image_urls": []},
        "completion": {"token_ids": [20, 3], "logprobs": [-0.2, -0.02]},
        "reward": None,
        "done": True,
        "raw_call": {
            "request": {"model": "toy-policy", "temperature": 1.0},
            "response": {"id": "chatcmpl-p2", "model": "toy-policy"},
        },
        "metadata": {"policy_version": 5},
    }
    src, dst = tmp_path / "triplets.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps([plain, tokens]))
    assert main(["import", "agl-events", str(src), str(dst), "--role", "policy"]) == 0
    a, b = map(orjson.loads, dst.read_bytes().splitlines())
    assert a["rollout"]["logprobs"] == [-0.1, -0.5, -0.01] and a["model"]["policy_version"] == 4
    assert (b["call_id"], b["rollout"]["logprobs"], b["model"]["policy_version"]) == ("chatcmpl-p2", [-0.2, -0.02], 5)
    assert b["prompt"]["token_ids"] == PROMPT_A and b["response"]["provenance"] == "engine"
    assert b["sampling"]["temperature"] == 1.0 and b["role"] == "policy"


def test_a_rollout_with_its_triplets(tmp_path):
    # a rollout-manager line: the rollout and its triplets (log-probs as a plain list), the version on the rollout
    line = {
        "rollout_id": "ro-7",
        "attempt_id": "at-2",
        "model_version": 9,
        "final_reward": 1.0,
        "triplets": [
            {
                "prompt": {"token_ids": PROMPT_A},
                "response": {"token_ids": [20, 3], "logprobs": [-0.2, -0.02]},
                "reward": None,
                "metadata": {"response_id": "r-1"},
            },
            {
                "prompt": {"token_ids": PROMPT_A + [20, 3, 44]},
                "response": {"token_ids": [21, 3], "logprobs": [-0.5, -0.01]},
                "reward": 1.0,
                "metadata": {"response_id": "r-2", "model_version": 10},
            },
        ],
    }
    src, dst = tmp_path / "rollouts.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps([line]))
    assert main(["import", "agl-events", str(src), str(dst), "--role", "policy"]) == 0
    a, b = map(orjson.loads, dst.read_bytes().splitlines())
    assert (a["call_id"], a["trajectory_id"], a["call_index"], a["rollout"]["logprobs"]) == (
        "r-1",
        "ro-7:at-2",
        0,
        [-0.2, -0.02],
    )
    assert (a["model"]["policy_version"], b["model"]["policy_version"], b["call_index"]) == (9, 10, 1)


def _content_for_another_token():
    # position 1's entry is for token 22, not the sampled 21 (a merged or re-ordered log): its -0.7 is 22's
    content = [dict(e) for e in CONTENT]
    content[1] = {"token": "token_id:22", "logprob": -0.7, "bytes": [], "top_logprobs": []}
    return content


def test_span_logprob_entry_for_another_token_is_not_the_sampled_ids(tmp_path, toy):
    spans = [
        span("a-main", None, "agent", 1, **{"agent.name": "Assistant"}),
        span("llm-1", "a-main", "raw_gen_ai_request", 2, **proxy_attrs("chatcmpl-1", [20, 21, 3])),
        span(
            "llm-2",
            "a-main",
            "raw_gen_ai_request",
            3,
            **proxy_attrs("chatcmpl-2", [20, 21, 3], _content_for_another_token()),
        ),
    ]
    src, dst = tmp_path / "spans.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(spans))
    import_agl(src, dst, tokenizer=toy, agent_match=r"^Assistant$")
    recs = {r["call_id"]: r for r in map(orjson.loads, dst.read_bytes().splitlines())}
    assert recs["chatcmpl-1"]["rollout"]["logprobs"] == [-0.105361, -0.510826, -0.01005]  # clean: kept
    bad = recs["chatcmpl-2"]
    assert bad["rollout"] == {"logprobs": [None, None, None]}  # was [-0.105361, -0.7, -0.01005]
    assert bad["extra"]["logprobs_token_mismatch"] == [1] and bad["extra"]["logprobs_unaligned"] is True


def test_triplet_logprob_entry_for_another_token_is_not_the_sampled_ids(tmp_path):
    triplet = {
        "rollout_id": "ro-5",
        "attempt_id": "at-1",
        "prompt": {"token_ids": PROMPT_A, "raw_content": []},
        "response": {"token_ids": [20, 21, 3], "raw_content": [], "logprobs": _content_for_another_token()},
        "reward": 0.5,
        "metadata": {"response_id": "chatcmpl-t1", "agent_name": "Assistant"},
    }
    src, dst = tmp_path / "triplets.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps([triplet]))
    assert main(["import", "agl-events", str(src), str(dst), "--role", "policy"]) == 0
    (r,) = map(orjson.loads, dst.read_bytes().splitlines())
    assert r["rollout"]["logprobs"] == [None, None, None] and "top_k" not in r["rollout"]
    assert r["extra"]["logprobs_token_mismatch"] == [1]
