"""vLLM importer on records in the exact shapes of vLLM's current OpenAI server (chat_completion/serving.py,
completion/serving.py): the sampled token listed first in ``top_logprobs`` (so the list is unsorted, or the k-th
entry is pushed out), ``echo=True`` completions, HTTP error bodies, mixed chat/completions, streamed ``n > 1``.
Fixtures written for these tests from reading that code."""

from __future__ import annotations

import copy

import orjson

from workers.fidelity import audit_file
from workers.fidelity.join import join

from .conftest import PROMPT_A, TASK_LIST_FILES
from .helpers import dumps
from .test_importers import chat_exchange, run_vllm


def tid(i):
    return f"token_id:{i}"


def lp_entry(sampled, sampled_lp, listed):
    """One ``logprobs.content`` entry as vLLM's chat server writes it with ``return_tokens_as_token_ids``: the
    step's dict is {sampled, top-1, …, top-k}; ``top_logprobs`` keeps its first k items in that order."""
    return {
        "token": tid(sampled),
        "logprob": sampled_lp,
        "bytes": list(tid(sampled).encode()),
        "top_logprobs": [{"token": tid(i), "logprob": v, "bytes": list(tid(i).encode())} for i, v in listed],
    }


def unsorted_chat():
    ex = chat_exchange()
    ch = ex["response"]["choices"][0]
    ch["token_ids"] = [20, 21, 3]
    # position 0: sampled = argmax → [20, 24], already descending
    # position 1: sampled 21 is rank 2 of top-2 → dict order [21, 20] (unsorted); after sorting 21 is lowest
    # position 2: sampled 3 is outside the top 2 → [3, 22] (3 pushed top-2 #2 out): not a top-2 list as logged
    ch["logprobs"]["content"] = [
        lp_entry(20, -0.105361, [(20, -0.105361), (24, -2.995732)]),
        lp_entry(21, -1.5, [(21, -1.5), (22, -0.3)]),
        lp_entry(3, -4.0, [(3, -4.0), (22, -0.2)]),
    ]
    return ex


def test_chat_top_logprobs_sorted_and_sampled_entry_dropped_when_lowest(tmp_path, toy):
    _, (r,), inf = run_vllm(tmp_path, [unsorted_chat()], toy)
    assert r["rollout"]["logprobs"] == [-0.105361, -1.5, -4.0]  # kept
    assert r["rollout"]["top_k"] == [[[20, -0.105361], [24, -2.995732]], [[22, -0.3]], [[22, -0.2]]]
    for pos in r["rollout"]["top_k"]:  # descending and unique: what the certificate requires
        assert [v for _, v in pos] == sorted((v for _, v in pos), reverse=True)
        assert len({i for i, _ in pos}) == len(pos)
    # after the join, every position is certified (none CERT_INPUT_INVALID, as the unsorted lists were)
    row = {
        "call_id": "chatcmpl-1",
        "logprobs": [-0.11, -1.4, -4.1],
        "task_prompt_sha256_declared": TASK_LIST_FILES,
        "top_k": [[[20, -0.11], [24, -2.9]], [[22, -0.35], [21, -1.4]], [[22, -0.25], [3, -4.1]]],
    }
    (tmp_path / "tr.jsonl").write_bytes(dumps([row]))
    join(inf, tmp_path / "tr.jsonl", tmp_path / "j.jsonl")
    rep = audit_file(tmp_path / "j.jsonl", tokenizer=toy)
    call = rep["calls"][0]
    assert call["verifiable_tokens"] == 3
    assert call["certificate"]["positions"] == 3 and call["certificate"]["invalid"] == 0
    assert rep["coverage"]["certificates"]["decisions"]["invalid"] == 0
    # the list as vLLM logged it (sampled first, unsorted) is what the certificate refuses
    raw = orjson.loads((tmp_path / "j.jsonl").read_bytes())
    raw["rollout"]["top_k"][1] = [[21, -1.5], [22, -0.3]]
    (tmp_path / "raw.jsonl").write_bytes(dumps([raw]))
    assert audit_file(tmp_path / "raw.jsonl", tokenizer=toy)["calls"][0]["certificate"]["invalid"] == 1


def test_completions_echo_keeps_the_output_logprobs(tmp_path, toy):
    prompt = [0, 40, 41]
    out = [20, 21, 3]
    # vLLM with echo: tokens/token_logprobs/top_logprobs cover prompt + output (the first prompt token has none),
    # text = prompt text + output text (prompt text is "" when return_token_ids is set)
    ex = {
        "request": {"model": "toy-policy", "prompt": "<|system|>You are", "echo": True, "logprobs": 1, "max_tokens": 3},
        "response": {
            "id": "cmpl-e",
            "object": "text_completion",
            "model": "toy-policy",
            "choices": [
                {
                    "index": 0,
                    "text": "<|system|>You arels -la<|end|>",
                    "finish_reason": "stop",
                    "prompt_token_ids": prompt,
                    "token_ids": out,
                    "logprobs": {
                        "tokens": [tid(i) for i in prompt + out],
                        "token_logprobs": [None, -3.0, -2.0, -0.105361, -0.510826, -0.01005],
                        "text_offset": [0, 10, 13, 17, 19, 22],
                        "top_logprobs": [
                            None,
                            {tid(40): -3.0},
                            {tid(41): -2.0},
                            {tid(20): -0.105361},
                            {tid(21): -0.510826},
                            {tid(3): -0.01005},
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
        },
        "meta": {"trajectory_id": "tE", "headers": {"X-FCR-Call-Role": "policy"}},
    }
    _, (r,), dst = run_vllm(tmp_path, [ex], toy)
    assert r["response"]["token_ids"] == out and r["prompt"]["token_ids"] == prompt
    assert r["rollout"]["logprobs"] == [-0.105361, -0.510826, -0.01005]  # not dropped as "unaligned"
    assert "extra" not in r or "logprobs_unaligned" not in r["extra"]
    assert r["response"]["text"] == "ls -la<|end|>"  # the echoed prompt text is not the response's
    c = audit_file(dst, tokenizer=toy)["calls"][0]
    assert "LOGPROB_MISSING" not in c["reasons"] and "TEXT_ID_MISMATCH" not in c["reasons"]


def test_http_error_body_keeps_the_declared_role(tmp_path, toy):
    err = chat_exchange()
    err["response"] = {
        "error": {
            "message": "This model's maximum context length is 4096 tokens.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
    err["meta"]["call_index"] = 1
    legacy = chat_exchange()
    legacy["response"] = {"object": "error", "message": "overloaded", "type": "ServiceUnavailableError", "code": 503}
    legacy["meta"]["call_index"] = 2
    stats, recs, dst = run_vllm(tmp_path, [chat_exchange(), err, legacy], toy)
    assert stats["failed"] == 2
    for r in recs[1:]:
        assert (r["role"], r["role_source"], r["purpose"]) == ("policy", "header", "main_loop")
        assert r["response"]["provenance"] == "missing" and r["trajectory_id"] == "tA" and r["step"] == 7
    assert "maximum context length" in recs[1]["extra"]["import_error"]
    assert "overloaded" in recs[2]["extra"]["import_error"]
    rep = audit_file(dst, tokenizer=toy)
    assert rep["coverage"]["calls"]["spurious_call_rate"] == 0
    assert not any("undeclared role" in w for w in rep["protocol_warnings"])


def test_mixed_chat_and_completions_is_not_a_template_change(tmp_path, toy):
    comp = {
        "request": {"model": "toy-policy", "prompt": PROMPT_A, "logprobs": 1},
        "response": {
            "id": "cmpl-2",
            "object": "text_completion",
            "model": "toy-policy",
            "choices": [
                {
                    "index": 0,
                    "text": "ls",
                    "token_ids": [20],
                    "finish_reason": "stop",
                    "logprobs": {"tokens": [tid(20)], "token_logprobs": [-0.1], "top_logprobs": [{tid(20): -0.1}]},
                }
            ],
        },
        "meta": {"trajectory_id": "tA", "call_index": 1, "headers": {"X-FCR-Call-Role": "policy"}},
    }
    _, recs, dst = run_vllm(tmp_path, [chat_exchange(), comp], toy)
    assert [r["chat_template"] for r in recs] == [{"sha256": "t" * 64}, None]
    rep = audit_file(dst, tokenizer=toy)
    assert rep["coverage"]["template_change"] is False
    assert not any("template" in w for w in rep["protocol_warnings"])
    other = copy.deepcopy(chat_exchange())
    other["meta"]["call_index"] = 2
    src = tmp_path / "in2.jsonl"
    src.write_bytes(dumps([chat_exchange(), other]))
    from workers.fidelity.importers import import_vllm

    import_vllm(src, tmp_path / "a.jsonl", tokenizer=toy, chat_template_sha256="a" * 64)
    recs2 = [orjson.loads(x) for x in (tmp_path / "a.jsonl").read_bytes().splitlines()]
    recs2[1]["chat_template"]["sha256"] = "b" * 64  # a real change is still reported
    (tmp_path / "b.jsonl").write_bytes(dumps(recs2))
    assert audit_file(tmp_path / "b.jsonl", tokenizer=toy)["coverage"]["template_change"] is True


def test_streamed_n2_chat_interleaved_chunks(tmp_path, toy):
    ex = chat_exchange()
    ex["request"].update(stream=True, n=2)
    chunks = [
        {
            "id": "chatcmpl-s",
            "object": "chat.completion.chunk",
            "model": "toy-policy",
            "created": 1,
            "prompt_token_ids": PROMPT_A,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}},
                {"index": 1, "delta": {"role": "assistant", "content": ""}},
            ],
        }
    ]
    seqs = {0: [20, 21, 3], 1: [20, 24, 3]}
    for t in range(3):
        for i in (1, 0):  # choices arrive interleaved and out of order
            s = seqs[i][t]
            chunks.append(
                {
                    "id": "chatcmpl-s",
                    "object": "chat.completion.chunk",
                    "model": "toy-policy",
                    "choices": [
                        {
                            "index": i,
                            "delta": {"content": "x"},
                            "token_ids": [s],
                            "logprobs": {"content": [lp_entry(s, -0.1 * (t + 1), [(s, -0.1 * (t + 1))])]},
                            "finish_reason": "stop" if t == 2 else None,
                        }
                    ],
                }
            )
    chunks.append(
        {
            "id": "chatcmpl-s",
            "object": "chat.completion.chunk",
            "model": "toy-policy",
            "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18},
        }
    )
    ex["response"] = chunks
    _, recs, _ = run_vllm(tmp_path, [ex], toy)
    assert [r["call_id"] for r in recs] == ["chatcmpl-s#0", "chatcmpl-s#1"]
    assert [r["response"]["token_ids"] for r in recs] == [seqs[0], seqs[1]]
    assert all(r["prompt"]["token_ids"] == PROMPT_A and r["prompt"]["provenance"] == "engine" for r in recs)
    assert recs[1]["rollout"]["logprobs"] == [-0.1, -0.2, -0.30000000000000004]
    assert all(r["response"]["usage_completion_tokens"] is None for r in recs)


def test_openai_compatible_log_of_another_engine(tmp_path, toy):
    from workers.fidelity.importers import import_vllm

    src = tmp_path / "in.jsonl"
    src.write_bytes(dumps([chat_exchange()]))
    import_vllm(src, tmp_path / "o.jsonl", tokenizer=toy, engine="sglang")
    assert orjson.loads((tmp_path / "o.jsonl").read_bytes())["engine"]["name"] == "sglang"
    import_vllm(src, tmp_path / "v.jsonl", tokenizer=toy)
    assert orjson.loads((tmp_path / "v.jsonl").read_bytes())["engine"]["name"] == "vllm"


def _joined_audit(tmp_path, dst, rec, toy):
    row = {
        "call_id": rec["call_id"],
        "logprobs": [-0.11, -0.6, -0.02],
        "task_prompt_sha256_declared": TASK_LIST_FILES,
    }
    (tmp_path / "tr.jsonl").write_bytes(dumps([row]))
    join(dst, tmp_path / "tr.jsonl", tmp_path / "j.jsonl")
    return audit_file(tmp_path / "j.jsonl", tokenizer=toy)["calls"][0]


def test_chat_logprob_entry_for_another_token_than_the_sampled_id(tmp_path, toy):
    # ``token_ids`` says 21 was sampled at position 1, but its ``logprobs.content`` entry is for token 22 (a log
    # merged from two choices or re-ordered): -0.7 is the engine's value for 22, not for 21, and the sampled id is
    # absent from that position's top list. It was kept as 21's log-prob and the call came out fully verifiable.
    ex = chat_exchange()
    ch = ex["response"]["choices"][0]
    ch["logprobs"]["content"] = [
        lp_entry(20, -0.105361, [(20, -0.105361)]),
        lp_entry(22, -0.7, [(22, -0.7)]),
        lp_entry(3, -0.01005, [(3, -0.01005)]),
    ]
    _, (r,), dst = run_vllm(tmp_path, [ex], toy)
    assert r["response"]["token_ids"] == [20, 21, 3]
    assert r["rollout"]["logprobs"] == [None, None, None] and "top_k" not in r["rollout"]
    assert r["extra"]["logprobs_unaligned"] is True and r["extra"]["logprobs_token_mismatch"] == [1]
    call = _joined_audit(tmp_path, dst, r, toy)
    assert call["verifiable_tokens"] == 0 and "LOGPROB_MISSING" in call["reasons"]


def test_chat_logprob_token_text_for_another_token_with_a_tokenizer(tmp_path, toy):
    # the same without ``return_tokens_as_token_ids``: the entry's text " -l" is one vocabulary entry (24), not the
    # sampled 21 (" -la"); with the tokenizer the mismatch is seen. Without one the text cannot be mapped and the
    # values stay (positional, as the engine returned them).
    ex = chat_exchange()
    ex["response"]["choices"][0]["logprobs"]["content"][1]["token"] = " -l"
    _, (r,), _ = run_vllm(tmp_path, [ex], toy)
    assert r["rollout"]["logprobs"] == [None, None, None]
    assert r["extra"]["logprobs_token_mismatch"] == [1]
    _, (clean,), dst = run_vllm(tmp_path, [chat_exchange()], toy)  # a clean log keeps every value
    assert clean["rollout"]["logprobs"] == [-0.105361, -0.510826, -0.01005]
    assert "logprobs_token_mismatch" not in (clean.get("extra") or {})
    assert _joined_audit(tmp_path, dst, clean, toy)["verifiable_tokens"] == 3


def test_completions_logprob_token_for_another_token(tmp_path, toy):
    # an echoed completions log whose output tokens are listed in another order than ``token_ids`` (the last two
    # swapped): each log-prob is the engine's for the listed token, not for the id at that position
    from .test_importer_fixes import echo_exchange  # it imports this module

    ex = echo_exchange("<|system|>You are", "<|system|>You arels -la<|end|>")
    lp = ex["response"]["choices"][0]["logprobs"]
    lp["tokens"][-2:], lp["token_logprobs"][-2:] = lp["tokens"][:-3:-1], lp["token_logprobs"][:-3:-1]
    _, (r,), _ = run_vllm(tmp_path, [ex], toy)
    assert r["response"]["token_ids"] == [20, 21, 3]
    assert r["rollout"]["logprobs"] == [None, None, None]
    assert r["extra"]["logprobs_token_mismatch"] == [1, 2]
