"""Importers (vLLM and Agent Lightning, docs/fidelity-rules.md#importers) on samples built from the documented field
names, and the importer invariants: idempotent, one record per (call, choice), never fabricated log-probs or trainer
fields, source pointers preserved, parse failures become ``missing`` records."""

from __future__ import annotations

import copy
import json

import orjson
import pytest

from workers.fcr import validate_file
from workers.fidelity import audit_file
from workers.fidelity.importers import import_agl, import_vllm, safe_literal

from .conftest import PROMPT_A, TASK_LIST_FILES, TOY_SHA
from .helpers import dumps

LPS = [-0.105361, -0.510826, -0.01005]
TOPS = [
    [("ls", -0.105361), (" -l", -2.995732)],
    [(" -la", -0.510826), (" -l", -1.203973)],
    [("<|end|>", -0.01005), ("\n", -5.298317)],
]
STRS = ["ls", " -la", "<|end|>"]


def chat_content(strings=STRS, tops=TOPS, lps=LPS):
    return [
        {
            "token": s,
            "logprob": lp,
            "bytes": list(s.encode()),
            "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in top],
        }
        for s, lp, top in zip(strings, lps, tops)
    ]


def chat_exchange(**over):
    ex = {
        "request": {
            "model": "toy-policy",
            "messages": [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List files"}],
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": -1,
            "logprobs": True,
            "top_logprobs": 2,
            "return_token_ids": True,
            "logprobs_mode": "processed_logprobs",
        },
        "response": {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "toy-policy",
            "prompt_token_ids": PROMPT_A,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ls -la"},
                    "logprobs": {"content": chat_content()},
                    "finish_reason": "stop",
                    "token_ids": [20, 21, 3],
                }
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        },
        "meta": {
            "run_id": "run-toy",
            "trajectory_id": "tA",
            "step": 7,
            "call_index": 0,
            "task_prompt_sha256_declared": TASK_LIST_FILES,
            "headers": {"X-FCR-Call-Role": "policy", "X-FCR-Purpose": "main_loop"},
        },
    }
    for k, v in over.items():
        ex[k] = v
    return ex


def run_vllm(tmp_path, exchanges, toy=None, **kw):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(exchanges))
    stats = import_vllm(
        src, dst, tokenizer=toy, chat_template_sha256="t" * 64, generation_config_source="request_only", **kw
    )
    recs = [orjson.loads(x) for x in dst.read_bytes().splitlines()]
    return stats, recs, dst


# ---------------------------------------------------------------------------------------------- vLLM chat
def test_vllm_chat_record(tmp_path, toy):
    stats, recs, dst = run_vllm(tmp_path, [chat_exchange()], toy)
    assert stats["records"] == 1 and validate_file(dst)["valid"]
    r = recs[0]
    assert r["prompt"]["provenance"] == "engine" and r["prompt"]["token_ids"] == PROMPT_A
    assert (
        r["prompt"]["task_prompt_sha256_observed"] == TASK_LIST_FILES
    )  # sha256("List files"), docs/fcr.md#conventions
    assert r["response"] == {
        "token_ids": [20, 21, 3],
        "provenance": "engine",
        "text": None,
        "ids_sha256": "3a9b0683f5348d240de8f728cf9bd28fdbf69408947e2a46b1700db6c1d95566",
        "usage_completion_tokens": 3,
        "finish_reason": "stop",
    }
    assert r["rollout"]["logprobs"] == LPS
    assert r["rollout"]["top_k"] == [
        [[20, -0.105361], [24, -2.995732]],
        [[21, -0.510826], [24, -1.203973]],
        [[3, -0.01005], [22, -5.298317]],
    ]
    assert (r["role"], r["role_source"], r["purpose"]) == ("policy", "header", "main_loop")
    assert r["tokenizer"]["sha256"] == TOY_SHA and r["engine"]["logprobs_mode"] == "processed_logprobs"
    assert "trainer" not in r  # never fabricated
    assert r["source"]["ref"] == "in.jsonl:1"
    rep = audit_file(dst, tokenizer=toy)
    # everything the rollout side can prove passes; the trainer side is simply absent
    assert rep["calls"][0]["reasons"] == ["TRAINER_LOGPROB_MISSING"]
    assert rep["calls"][0]["lineage"] == "root-ok"


def test_vllm_token_id_strings(tmp_path):
    ex = chat_exchange()
    ch = ex["response"]["choices"][0]
    del ch["token_ids"]
    ch["logprobs"]["content"] = chat_content(
        ["token_id:20", "token_id:21", "token_id:3"], [[("token_id:20", -0.1), ("token_id:24", -3.0)]] * 3
    )
    _, (r,), _ = run_vllm(tmp_path, [ex])  # no tokenizer needed
    assert r["response"]["token_ids"] == [20, 21, 3] and r["response"]["provenance"] == "engine"
    assert r["rollout"]["top_k"][0] == [[20, -0.1], [24, -3.0]]


def test_vllm_token_strings_and_retokenized_fallbacks(tmp_path, toy):
    ex = chat_exchange()
    del ex["response"]["choices"][0]["token_ids"]
    _, (r,), dst = run_vllm(tmp_path, [ex], toy)
    assert r["response"]["provenance"] == "engine_token_strings" and r["response"]["token_strings"] == STRS
    assert r["response"]["token_ids"] == [20, 21, 3]
    assert audit_file(dst, tokenizer=toy)["calls"][0]["reasons"] == ["TRAINER_LOGPROB_MISSING"]
    # no ids and no per-token logprobs: only the text is left → retokenized, log-probs null (not invented)
    ex2 = chat_exchange()
    ch = ex2["response"]["choices"][0]
    del ch["token_ids"], ch["logprobs"]
    _, (r2,), dst2 = run_vllm(tmp_path, [ex2], toy)
    assert r2["response"]["provenance"] == "retokenized" and r2["response"]["token_ids"] == [20, 21]
    assert r2["rollout"]["logprobs"] == [None, None] and "top_k" not in r2["rollout"]
    assert audit_file(dst2, tokenizer=toy)["calls"][0]["primary_reason"] == "RESPONSE_IDS_RETOKENIZED"


def test_vllm_unmappable_topk_position_dropped(tmp_path, toy):
    ex = chat_exchange()
    ex["response"]["choices"][0]["logprobs"]["content"][1]["top_logprobs"][1]["token"] = "\ufffd"
    _, (r,), _ = run_vllm(tmp_path, [ex], toy)
    assert r["rollout"]["top_k"][1] == [] and r["extra"]["top_k_dropped_positions"] == [1]
    assert r["rollout"]["top_k"][0] != []


def test_vllm_sentinels_pass_through(tmp_path, toy):
    ex = chat_exchange()
    ex["response"]["choices"][0]["logprobs"]["content"][2]["logprob"] = -9999.0
    _, (r,), _ = run_vllm(tmp_path, [ex], toy)
    assert r["rollout"]["logprobs"][2] == -9999.0  # the importer reports; the audit judges


def test_vllm_n_choices_one_record_each(tmp_path, toy):
    ex = chat_exchange()
    c0 = ex["response"]["choices"][0]
    c1 = copy.deepcopy(c0)
    c1.update(index=1, token_ids=[20, 24, 3])
    ex["response"]["choices"] = [c1, c0]
    ex["response"]["usage"]["completion_tokens"] = 6
    _, recs, dst = run_vllm(tmp_path, [ex], toy)
    assert [r["call_id"] for r in recs] == ["chatcmpl-1#0", "chatcmpl-1#1"]
    assert [r["response"]["token_ids"] for r in recs] == [[20, 21, 3], [20, 24, 3]]
    assert all(r["response"]["usage_completion_tokens"] is None for r in recs)  # usage covers both choices
    assert validate_file(dst)["duplicate_call_ids"] == 0


def test_vllm_streaming_matches_non_streaming(tmp_path, toy):
    ex = chat_exchange()
    content = chat_content()
    chunks = [
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "toy-policy",
            "created": 1700000000,
            "prompt_token_ids": PROMPT_A,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        }
    ]
    for i, (tid, s) in enumerate(zip([20, 21, 3], ["ls", " -la", ""])):
        chunks.append(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "model": "toy-policy",
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": s},
                        "token_ids": [tid],
                        "logprobs": {"content": [content[i]]},
                        "finish_reason": "stop" if i == 2 else None,
                    }
                ],
            }
        )
    chunks.append(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "toy-policy",
            "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        }
    )
    streamed = chat_exchange(response=chunks)
    streamed["request"]["stream"] = True
    _, (a,), _ = run_vllm(tmp_path, [ex], toy)
    _, (b,), _ = run_vllm(tmp_path, [streamed], toy)
    for k in ("prompt", "response", "rollout", "sampling", "model", "role", "call_id"):
        assert a[k] == b[k], k


def test_vllm_completions_api(tmp_path, toy):
    ex = {
        "request": {"model": "toy-policy", "prompt": PROMPT_A, "temperature": 1.0, "logprobs": 2},
        "response": {
            "id": "cmpl-7",
            "object": "text_completion",
            "model": "toy-policy",
            "choices": [
                {
                    "index": 0,
                    "text": "ls -la<|end|>",
                    "finish_reason": "stop",
                    "logprobs": {
                        "tokens": ["token_id:20", "token_id:21", "token_id:3"],
                        "token_logprobs": LPS,
                        "top_logprobs": [
                            {"token_id:20": -0.105361, "token_id:24": -2.99},
                            {"token_id:21": -0.510826},
                            {"token_id:3": -0.01005},
                        ],
                    },
                }
            ],
            "usage": {"completion_tokens": 3},
        },
        "meta": {"trajectory_id": "tC", "headers": {"x-fcr-call-role": "policy"}},
    }
    _, (r,), dst = run_vllm(tmp_path, [ex], toy, run_id="run-x", step=3)
    assert r["engine"]["api"] == "completions" and r["chat_template"] is None
    assert r["prompt"]["provenance"] == "engine_input" and r["prompt"]["token_ids"] == PROMPT_A
    assert r["response"]["text"] == "ls -la<|end|>" and r["response"]["token_ids"] == [20, 21, 3]
    assert r["rollout"]["top_k"][0] == [[20, -0.105361], [24, -2.99]]
    assert (r["run_id"], r["step"]) == ("run-x", 3)
    c = audit_file(dst, tokenizer=toy)["calls"][0]
    assert "TEXT_ID_MISMATCH" not in c["reasons"] and "R4_NOT_EVALUABLE" not in c["reasons"]


def test_vllm_retries_marked_and_agl_events(tmp_path, toy):
    first = chat_exchange()
    second = chat_exchange()
    second["response"]["id"] = "chatcmpl-2"
    agl = {
        "rollout_id": "ro-1",
        "attempt_id": "at-2",
        "sequence_id": 4,
        "data": {"request": first["request"], "response": first["response"], "model_version": 12},
    }
    _, recs, dst = run_vllm(tmp_path, [first, second, agl], toy)
    assert recs[0]["purpose"] == "retry" and recs[1]["purpose"] == "main_loop"
    assert (recs[2]["trajectory_id"], recs[2]["call_index"], recs[2]["model"]["policy_version"]) == ("ro-1:at-2", 4, 12)
    assert recs[2]["role"] == "unknown" and recs[2]["role_source"] == "default"  # no header logged
    calls = audit_file(dst, tokenizer=toy)["calls"]
    assert calls[0]["primary_reason"] == "SUPERSEDED_RETRY"


def test_vllm_parse_failures_become_missing_records(tmp_path, toy):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps([chat_exchange()]) + b"{broken\n" + dumps([{"request": {}, "response": {"choices": []}}]))
    stats = import_vllm(src, dst, tokenizer=toy)
    recs = [orjson.loads(x) for x in dst.read_bytes().splitlines()]
    assert stats["records"] == 3 and stats["failed"] == 2
    assert [r["response"]["provenance"] for r in recs] == ["engine", "missing", "missing"]
    assert [r["source"]["ref"] for r in recs] == ["in.jsonl:1", "in.jsonl:2", "in.jsonl:3"]
    assert validate_file(dst)["valid"]
    rep = audit_file(dst, tokenizer=toy)
    assert rep["coverage"]["calls"]["total"] == 3  # coverage denominators stay honest


def test_vllm_truncated_gzip_log_stops_where_every_reader_stops(tmp_path, toy):
    # the importers read through the one bounded reader (docs/fcr.md#reading-a-run-log): the K complete exchanges
    # before the cut become records, the cut line K + 1 a ``missing`` record saying why, and nothing after it
    import gzip

    from tests.fcr.gzip_reference import inflatable_prefix

    exchanges = []
    for i in range(300):
        ex = chat_exchange()
        ex["meta"] = {**ex["meta"], "call_index": i}
        exchanges.append(ex)
    blob = gzip.compress(dumps(exchanges))
    blob = blob[: len(blob) // 2]
    k = inflatable_prefix(blob).count(b"\n")
    assert 0 < k < len(exchanges)
    src, dst = tmp_path / "in.jsonl.gz", tmp_path / "out.jsonl"
    src.write_bytes(blob)
    stats = import_vllm(src, dst, tokenizer=toy)
    recs = [orjson.loads(x) for x in dst.read_bytes().splitlines()]
    assert stats["records"] == k + 1 and stats["failed"] == 1
    assert [r["source"]["ref"] for r in recs] == [f"in.jsonl.gz:{n}" for n in range(1, k + 2)]
    assert [r["response"]["provenance"] for r in recs].count("engine") == k
    assert recs[-1]["response"]["provenance"] == "missing" and "truncated" in recs[-1]["extra"]["import_error"]


def test_vllm_idempotent(tmp_path, toy):
    src = tmp_path / "in.jsonl"
    src.write_bytes(dumps([chat_exchange(), chat_exchange(), b"nope"]))
    import_vllm(src, tmp_path / "a.jsonl", tokenizer=toy)
    import_vllm(src, tmp_path / "b.jsonl", tokenizer=toy)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


# ---------------------------------------------------------------------------------------------- AGL spans
def agl_spans(marker):
    content = json.dumps(
        chat_content(
            ["token_id:20", "token_id:21", "token_id:3"],
            [[("token_id:20", -0.105361)], [("token_id:21", -0.510826)], [("token_id:3", -0.01005)]],
        )
    )
    base = {"rollout_id": "ro-1", "attempt_id": "at-1", "trace_id": "tr"}
    return [
        dict(
            base,
            sequence_id=0,
            span_id="s-agent",
            parent_id=None,
            name="agent.coder",
            attributes={"agent.name": "coder"},
        ),  # Agent Lightning names agents from attributes
        dict(
            base,
            sequence_id=1,
            span_id="s-client",
            parent_id="s-agent",
            name="openai.chat.completion",
            attributes={
                "gen_ai.request.model": "toy-policy",
                "gen_ai.request.temperature": 1.0,
                "gen_ai.request.max_tokens": 64,
                "gen_ai.response.id": "chatcmpl-9",
            },
        ),
        dict(
            base,
            sequence_id=2,
            span_id="s-proxy",
            parent_id="s-client",
            name="raw_gen_ai_request",
            attributes={
                "llm.hosted_vllm.id": "chatcmpl-9",
                "llm.hosted_vllm.model": "toy-policy",
                "llm.hosted_vllm.prompt_token_ids": repr(PROMPT_A),  # Python-repr string
                "llm.hosted_vllm.response_token_ids": "[[20, 21, 3]]",  # list of lists
                "llm.hosted_vllm.choices.0.logprobs.content": content,
            },
        ),
        dict(
            base,
            sequence_id=3,
            span_id="s-reward",
            parent_id="s-agent",
            name="agentlightning.reward",
            attributes={"reward": 1.0},
        ),
        dict(
            base,
            sequence_id=4,
            span_id="s-anon",
            parent_id=None,
            name="openai.chat.completion",
            attributes={
                "gen_ai.response.id": "chatcmpl-10",
                "prompt_token_ids": "(0, 33, 34, 3, 1, 44, 45, 3, 2)",
                "llm.hosted_vllm.choices": "[{'token_ids': (35, 3), 'index': 0}]",
            },
        ),
        dict(
            base,
            rollout_id="ro-2",
            sequence_id=0,
            span_id="s-evil",
            parent_id=None,
            name="openai.chat.completion",
            attributes={
                "gen_ai.response.id": "chatcmpl-11",
                "prompt_token_ids": f"__import__('pathlib').Path({str(marker)!r}).touch()",
                "response_token_ids": [1, 2],
            },
        ),
    ]


def run_agl(tmp_path, spans, toy=None, **kw):
    src, dst = tmp_path / "spans.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(dumps(spans))
    stats = import_agl(src, dst, tokenizer=toy, **kw)
    return stats, {r["call_id"]: r for r in map(orjson.loads, dst.read_bytes().splitlines())}, dst


def test_agl_spans(tmp_path, toy):
    marker = tmp_path / "pwned"
    stats, recs, dst = run_agl(
        tmp_path, agl_spans(marker), toy, agent_match=r"^coder$", steps={"ro-1": 7}, logprobs_mode="processed_logprobs"
    )
    assert not marker.exists()  # repr strings are parsed as literals, never evaluated
    assert stats["duplicates_dropped"] == 1 and stats["records"] == 3
    main = recs["chatcmpl-9"]
    assert main["extra"]["span_id"] == "s-proxy"  # the duplicate with token ids wins
    assert (main["role"], main["role_source"]) == ("policy", "config")
    assert main["trajectory_id"] == "ro-1:at-1" and main["step"] == 7 and main["call_index"] == 0
    assert main["prompt"]["token_ids"] == PROMPT_A and main["prompt"]["provenance"] == "engine"
    assert main["response"]["token_ids"] == [20, 21, 3]
    # vLLM lists the sampled token first: a one-entry list naming only it is not known to be the top-1
    assert main["rollout"]["logprobs"] == LPS and main["rollout"]["top_k"][1] == []
    assert main["sampling"]["temperature"] == 1.0 and main["model"]["served_name"] == "toy-policy"
    anon = recs["chatcmpl-10"]
    assert (anon["role"], anon["role_source"]) == ("unknown", "default")  # outside the trained agent
    assert anon["response"]["token_ids"] == [35, 3] and anon["call_index"] == 1
    assert anon["rollout"]["logprobs"] == [None, None]
    evil = recs["chatcmpl-11"]
    assert evil["prompt"]["provenance"] == "missing" and evil["response"]["token_ids"] == [1, 2]
    assert all("trainer" not in r for r in recs.values())
    assert validate_file(dst)["valid"]
    rep = audit_file(dst, tokenizer=toy)
    got = {c["call_id"]: c["primary_reason"] for c in rep["calls"]}
    assert got["chatcmpl-9"] == "LINEAGE_UNVERIFIED"  # no declared task hash in AGL spans: cannot prove lineage
    assert got["chatcmpl-10"] == "ROLE_UNVERIFIED"


def test_agl_without_agent_match_everything_unknown_and_idempotent(tmp_path):
    spans = agl_spans(tmp_path / "m")
    _, recs, dst = run_agl(tmp_path, spans)
    assert {r["role"] for r in recs.values()} == {"unknown"}
    first = dst.read_bytes()
    _, _, dst2 = run_agl(tmp_path, spans)
    assert dst2.read_bytes() == first


def test_agl_bad_lines_become_records(tmp_path):
    src, dst = tmp_path / "s.jsonl", tmp_path / "o.jsonl"
    src.write_bytes(dumps(agl_spans(tmp_path / "m")[:3]) + b"not json\n")
    stats = import_agl(src, dst)
    assert stats["records"] == 2 and stats["failed"] == 1
    assert validate_file(dst)["valid"]


@pytest.mark.parametrize(
    "value,expected",
    [
        ("[1, 2, 3]", [1, 2, 3]),
        ("(1, 2)", [1, 2]),
        ([1, 2], [1, 2]),
        ((4, 5), [4, 5]),
        ("[[1, 2]]", [[1, 2]]),
        ("{'a': (1,)}", {"a": [1]}),
        ("os.system('x')", None),
        ("__import__('os')", None),
        ("", None),
        ("[1, 2", None),
        ("lambda: 1", None),
    ],
)
def test_safe_literal(value, expected):
    assert safe_literal(value) == expected
