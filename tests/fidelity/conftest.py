"""The worked example records and the toy tokenizer of docs/fcr.md#toy-tokenizer."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from workers.fidelity.tokenizer import FidelityTokenizer

TOY_VOCAB_JSON = (
    '{"0":"<|system|>","1":"<|user|>","10":"H","11":"AV","12":"ING","13":"HAV","2":"<|assistant|>",'
    '"20":"ls","21":" -la","22":"\\n","24":" -l","3":"<|end|>","33":"Title","34":":","35":" Listing",'
    '"40":"You","41":" are","42":" an","43":" agent","44":"List","45":" files","46":".","47":"Say",'
    '"48":" it"}'
)
TOY_VOCAB = json.loads(TOY_VOCAB_JSON)
TOY_SHA = "100487659ed21cf0c9ec3649a3e2d3ed74759bbb416eff4dab4f6c72a31accd8"
TEMPLATE_SHA = "64caafe4aacf4c1466fa74060730180df25fd866303ee54059c14967ed5f6b68"
TASK_LIST_FILES = "e700817c9d5ece144fe01c5bdfcc54007ca08434e37552df72e6702a25096c43"
TASK_SAY_IT = "d08ee90704871e3d4055a23f16a395d1d19c4e5fb595922b7035b0549983b96e"
PROMPT_A = [0, 40, 41, 42, 43, 46, 3, 1, 44, 45, 3, 2]

SHARED = {
    "schema": "fcr/1",
    "run_id": "run-toy",
    "step": 7,
    "model": {"served_name": "toy-policy", "policy_version": 7},
    "tokenizer": {"id": "toy", "sha256": TOY_SHA},
    "chat_template": {"sha256": TEMPLATE_SHA},
    "engine": {
        "name": "vllm",
        "api": "chat.completions",
        "logprobs_mode": "processed_logprobs",
        "generation_config_source": "request_only",
    },
    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1},
}


def ids_sha(ids):
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


def record(**fields):
    """SHARED + fields; ``trainer.policy_version`` 7 when a trainer block is given (the shared fields of
    docs/fcr.md#toy-tokenizer)."""
    r = copy.deepcopy(SHARED)
    r.update(copy.deepcopy(fields))
    if "trainer" in r:
        r["trainer"].setdefault("policy_version", 7)
    r.setdefault("source", {"format": "vllm_openai_chat", "ref": "test"})
    return r


EXAMPLE_A = record(
    trajectory_id="tA",
    call_id="tA-0",
    call_index=0,
    role="policy",
    role_source="header",
    purpose="main_loop",
    prompt={
        "token_ids": PROMPT_A,
        "provenance": "engine",
        "ids_sha256": "19eb1dc19d1033a1b2955eeeefdd1e4966f848bab91bef799d96c4621a20d52a",
        "task_prompt_sha256_declared": TASK_LIST_FILES,
        "task_prompt_sha256_observed": TASK_LIST_FILES,
    },
    response={
        "token_ids": [20, 21, 3],
        "provenance": "engine",
        "ids_sha256": "3a9b0683f5348d240de8f728cf9bd28fdbf69408947e2a46b1700db6c1d95566",
        "text": None,
        "usage_completion_tokens": 3,
        "finish_reason": "stop",
    },
    rollout={
        "logprobs": [-0.105361, -0.510826, -0.01005],
        "top_k": [
            [[20, -0.105361], [24, -2.995732]],
            [[21, -0.510826], [24, -1.203973]],
            [[3, -0.01005], [22, -5.298317]],
        ],
    },
    trainer={
        "logprobs": [-0.127833, -0.693147, -0.01005],
        "top_k": [
            [[20, -0.127833], [24, -2.813411]],
            [[21, -0.693147], [24, -0.916291]],
            [[3, -0.01005], [22, -5.115996]],
        ],
        "loss_mask_used": [1, 1, 1],
        "sample_id": "tA-0",
    },
    source={"format": "vllm_openai_chat", "ref": "gateway.jsonl:1"},
)

EXAMPLE_C = record(
    trajectory_id="tA",
    call_id="tA-bg-1",
    call_index=1,
    role="background",
    role_source="header",
    purpose="title",
    sampling={"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 32},
    prompt={
        "token_ids": [0, 33, 34, 3, 1, 44, 45, 3, 2],
        "provenance": "engine",
        "ids_sha256": "2f5628b4d8dd3d2f2a3d46dcc9a4f9d6604794a7a1d09d3bc4dac047d3edbbac",
        "task_prompt_sha256_declared": None,
        "task_prompt_sha256_observed": None,
    },
    response={
        "token_ids": [35, 3],
        "provenance": "engine",
        "ids_sha256": "db6c87d90151d335a6a163251bd46e7ee7130301a9d2ba338e21b18b5eabdfe1",
        "usage_completion_tokens": 2,
    },
    rollout={"logprobs": [-1.2, -0.05]},
    source={"format": "vllm_openai_chat", "ref": "gateway.jsonl:2"},
)

EXAMPLE_D = record(
    trajectory_id="tD",
    call_id="tD-0",
    call_index=0,
    role="policy",
    role_source="header",
    purpose="main_loop",
    prompt={
        "token_ids": PROMPT_A,
        "provenance": "engine",
        "ids_sha256": ids_sha(PROMPT_A),
        "task_prompt_sha256_declared": TASK_LIST_FILES,
        "task_prompt_sha256_observed": TASK_LIST_FILES,
    },
    response={
        "token_ids": [20, 24, 22, 3],
        "provenance": "engine",
        "ids_sha256": "2639a5f5ca370db0ca0517188fcf4fa87d361d1d7d4f6205647fa1598cea5b01",
        "text": None,
        "usage_completion_tokens": 4,
    },
    rollout={"logprobs": [-0.2, -0.7, -9999.0, -0.01]},
    trainer={"logprobs": [-0.21, -0.69, -3.2, -0.01], "loss_mask_used": [1, 1, 1, 1]},
)


@pytest.fixture(scope="session")
def toy():
    return FidelityTokenizer.toy(TOY_VOCAB)


@pytest.fixture
def A():
    return copy.deepcopy(EXAMPLE_A)


@pytest.fixture
def C():
    return copy.deepcopy(EXAMPLE_C)


@pytest.fixture
def D():
    return copy.deepcopy(EXAMPLE_D)


@pytest.fixture
def settings():
    """Stand-in for pytest-django's ``settings`` (requested by the portal's autouse fixture) for ``-p no:django``."""
    return None
