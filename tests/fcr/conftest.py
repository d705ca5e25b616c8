"""Fixtures for the fcr/1 validator tests: Example A
(docs/fcr.md#example-a-a-fully-verifiable-policy-call) as a record, and file writers."""

from __future__ import annotations

import copy
import gzip

import orjson
import pytest

EXAMPLE_A = {
    "schema": "fcr/1",
    "run_id": "run-toy",
    "step": 7,
    "model": {"served_name": "toy-policy", "policy_version": 7},
    "tokenizer": {"id": "toy", "sha256": "100487659ed21cf0c9ec3649a3e2d3ed74759bbb416eff4dab4f6c72a31accd8"},
    "chat_template": {"sha256": "64caafe4aacf4c1466fa74060730180df25fd866303ee54059c14967ed5f6b68"},
    "engine": {
        "name": "vllm",
        "api": "chat.completions",
        "logprobs_mode": "processed_logprobs",
        "generation_config_source": "request_only",
    },
    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1},
    "trajectory_id": "tA",
    "call_id": "tA-0",
    "call_index": 0,
    "role": "policy",
    "role_source": "header",
    "purpose": "main_loop",
    "prompt": {
        "token_ids": [0, 40, 41, 42, 43, 46, 3, 1, 44, 45, 3, 2],
        "provenance": "engine",
        "ids_sha256": "19eb1dc19d1033a1b2955eeeefdd1e4966f848bab91bef799d96c4621a20d52a",
        "task_prompt_sha256_declared": "e700817c9d5ece144fe01c5bdfcc54007ca08434e37552df72e6702a25096c43",
        "task_prompt_sha256_observed": "e700817c9d5ece144fe01c5bdfcc54007ca08434e37552df72e6702a25096c43",
    },
    "response": {
        "token_ids": [20, 21, 3],
        "provenance": "engine",
        "ids_sha256": "3a9b0683f5348d240de8f728cf9bd28fdbf69408947e2a46b1700db6c1d95566",
        "text": None,
        "usage_completion_tokens": 3,
        "finish_reason": "stop",
    },
    "rollout": {
        "logprobs": [-0.105361, -0.510826, -0.01005],
        "top_k": [
            [[20, -0.105361], [24, -2.995732]],
            [[21, -0.510826], [24, -1.203973]],
            [[3, -0.01005], [22, -5.298317]],
        ],
    },
    "trainer": {
        "policy_version": 7,
        "logprobs": [-0.127833, -0.693147, -0.01005],
        "top_k": [
            [[20, -0.127833], [24, -2.813411]],
            [[21, -0.693147], [24, -0.916291]],
            [[3, -0.01005], [22, -5.115996]],
        ],
        "loss_mask_used": [1, 1, 1],
        "sample_id": "tA-0",
    },
    "source": {"format": "vllm_openai_chat", "ref": "gateway.jsonl:1"},
}


@pytest.fixture
def rec():
    return copy.deepcopy(EXAMPLE_A)


def dump_lines(records) -> bytes:
    out = []
    for r in records:
        out.append(r if isinstance(r, bytes) else orjson.dumps(r))
    return b"\n".join(out) + b"\n"


@pytest.fixture
def write_jsonl(tmp_path):
    def _write(records, name="run.jsonl", gz=False):
        p = tmp_path / name
        data = dump_lines(records)
        p.write_bytes(gzip.compress(data) if gz else data)
        return p

    return _write


@pytest.fixture
def settings():
    """Stand-in for pytest-django's ``settings`` (requested by the portal's autouse fixture in
    tests/conftest.py) so these engine tests run with ``-p no:django``; the portal fixture ignores it here."""
    return None
