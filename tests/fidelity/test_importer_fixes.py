"""Importer fixes of issue #27 on fixtures in the upstream shapes (written for these tests from reading that code):
vLLM completions with ``echo`` (the echoed prompt is never response), vLLM's tokens-in/tokens-out generate endpoint
(``{token_ids, sampling_params}`` → ``choices[].token_ids``) keeping the engine's prompt ids, an HTTP error record
with no tokens never counted verifiable."""

from __future__ import annotations

from workers.fidelity import audit_file, audit_records

from .helpers import variant
from .test_importer_vllm_shapes import tid
from .test_importers import run_vllm

PROMPT, OUT = [0, 40, 41], [20, 21, 3]
LPS = [-0.105361, -0.510826, -0.01005]


def echo_exchange(prompt, text, *, choice_ids=True, usage=True, return_token_ids=False):
    ch = {
        "index": 0,
        "text": text,
        "finish_reason": "stop",
        "logprobs": {
            "tokens": [tid(i) for i in PROMPT + OUT],
            "token_logprobs": [None, -3.0, -2.0, *LPS],
            "top_logprobs": None,
        },
    }
    if choice_ids:
        ch["prompt_token_ids"], ch["token_ids"] = PROMPT, OUT
    resp = {"id": "cmpl-e", "object": "text_completion", "model": "toy-policy", "choices": [ch]}
    if usage:
        resp["usage"] = {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    return {
        "request": {
            "model": "toy-policy",
            "prompt": prompt,
            "echo": True,
            "logprobs": 0,
            "max_tokens": 3,
            "return_token_ids": return_token_ids,
        },
        "response": resp,
        "meta": {"trajectory_id": "tE", "headers": {"X-FCR-Call-Role": "policy"}},
    }


def test_echo_with_prompt_ids_sent(tmp_path, toy):
    # a prompt sent as ids is echoed as its decoded text: the text cannot be cut, so it is not kept as the response's
    _, (r,), _ = run_vllm(
        tmp_path, [echo_exchange(PROMPT, "<|system|>You arels -la<|end|>", return_token_ids=True)], toy
    )
    assert r["response"]["token_ids"] == OUT and r["rollout"]["logprobs"] == LPS
    assert r["response"]["text"] is None
    assert r["prompt"]["token_ids"] == PROMPT


def test_echo_without_token_ids_cut_by_the_prompt(tmp_path, toy):
    # no return_token_ids: the token strings hold prompt + output; the cut comes from the sent ids or usage
    _, (r,), _ = run_vllm(tmp_path, [echo_exchange(PROMPT, "x", choice_ids=False)], toy)
    assert r["response"]["token_ids"] == OUT and r["rollout"]["logprobs"] == LPS
    assert r["prompt"]["provenance"] == "engine_input"
    _, (r,), _ = run_vllm(
        tmp_path, [echo_exchange("<|system|>You are", "<|system|>You arels -la<|end|>", choice_ids=False)], toy
    )
    assert r["response"]["token_ids"] == OUT and r["response"]["text"] == "ls -la<|end|>"


def test_echo_that_cannot_be_cut_is_refused(tmp_path, toy):
    _, (r,), dst = run_vllm(tmp_path, [echo_exchange("<|system|>You are", "?", choice_ids=False, usage=False)], toy)
    assert r["response"]["token_ids"] == [] and r["response"]["provenance"] == "missing"
    assert "echo" in r["extra"]["import_error"]
    assert audit_file(dst, tokenizer=toy)["coverage"]["verifiable_policy_tokens"] == 0


def generate_exchange(**resp_over):
    content = [{"token": tid(i), "logprob": v, "bytes": None, "top_logprobs": []} for i, v in zip(OUT, LPS)]
    resp = {
        "request_id": "gen-1",
        "choices": [{"index": 0, "token_ids": OUT, "finish_reason": "stop", "logprobs": {"content": content}}],
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }
    resp.update(resp_over)
    return {
        "request": {
            "request_id": "gen-1",
            "token_ids": PROMPT,
            "model": "toy-policy",
            "sampling_params": {"temperature": 0.7, "top_p": 1.0, "max_tokens": 3, "logprobs": 0},
        },
        "response": resp,
        "meta": {"trajectory_id": "tG", "headers": {"X-FCR-Call-Role": "policy"}},
    }


def test_vllm_generate_endpoint_keeps_the_prompt_ids(tmp_path, toy):
    _, (r,), _ = run_vllm(tmp_path, [generate_exchange()], toy)
    assert r["engine"]["api"] == "generate"
    assert (r["prompt"]["token_ids"], r["prompt"]["provenance"]) == (PROMPT, "engine_input")
    assert (r["response"]["token_ids"], r["response"]["provenance"]) == (OUT, "engine")
    assert r["rollout"]["logprobs"] == LPS and r["sampling"]["temperature"] == 0.7
    _, (r,), _ = run_vllm(tmp_path, [generate_exchange(prompt_token_ids=PROMPT)], toy)  # echoed by the engine
    assert (r["prompt"]["token_ids"], r["prompt"]["provenance"]) == (PROMPT, "engine")


def test_http_error_status_with_no_tokens_is_not_a_verifiable_call(tmp_path, toy, A):
    ex = generate_exchange(
        choices=[{"index": 0, "token_ids": [], "finish_reason": "abort", "logprobs": {"content": []}}]
    )
    ex["meta"]["status"] = 500
    _, (r,), dst = run_vllm(tmp_path, [ex], toy)
    assert r["response"]["provenance"] == "missing" and r["extra"]["http_status"] == 500
    rep = audit_file(dst, tokenizer=toy)
    assert rep["calls"][0]["verdict"] == "excluded" and rep["calls"][0]["reasons"]
    # the audit itself: a policy record with no tokens and missing ids fails its rules as a call
    empty = variant(
        A,
        **{
            "response.token_ids": [],
            "response.provenance": "missing",
            "rollout.logprobs": [],
            "trainer.logprobs": [],
            "trainer.top_k": KeyError,
            "rollout.top_k": KeyError,
            "trainer.loss_mask_used": KeyError,
            "response.ids_sha256": None,
            "response.text": None,
            "response.usage_completion_tokens": None,
        },
    )
    c = audit_records([empty], tokenizer=toy)["calls"][0]
    assert c["verdict"] == "excluded" and "RESPONSE_IDS_MISSING" in c["reasons"]


def test_sglang_chat_with_meta_info_and_prompt_ids(tmp_path, toy):
    # SGLang's /v1/chat/completions with return_prompt_token_ids + return_meta_info: the prompt ids on the choice,
    # the sampled ids and log-probs in choices[].meta_info.output_token_logprobs (token strings are text, not ids)
    content = [
        {"token": t, "logprob": v, "bytes": None, "top_logprobs": []} for t, v in zip(["ls", " -la", "<|end|>"], LPS)
    ]
    ex = {
        "request": {
            "model": "toy-policy",
            "messages": [{"role": "user", "content": "List files"}],
            "logprobs": True,
            "return_prompt_token_ids": True,
            "return_meta_info": True,
        },
        "response": {
            "id": "sg-chat-1",
            "object": "chat.completion",
            "model": "toy-policy",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "prompt_token_ids": PROMPT,
                    "message": {"role": "assistant", "content": "ls -la"},
                    "logprobs": {"content": content},
                    "meta_info": {"output_token_logprobs": [[v, i, None] for v, i in zip(LPS, OUT)]},
                }
            ],
        },
        "meta": {"trajectory_id": "tC", "headers": {"X-FCR-Call-Role": "policy"}},
    }
    _, (r,), _ = run_vllm(tmp_path, [ex], None, engine="sglang")
    assert (r["prompt"]["token_ids"], r["prompt"]["provenance"]) == (PROMPT, "engine")
    assert (r["response"]["token_ids"], r["response"]["provenance"]) == (OUT, "engine")
    assert r["rollout"]["logprobs"] == LPS and r["engine"]["name"] == "sglang"
