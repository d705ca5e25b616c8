"""vLLM and SGLang exchange logs carrying routed experts (fixtures written here in the engines' response shapes:
vLLM's completions server ``choices[i].routed_experts`` = base64 of an .npy ``[prompt + completion − 1, layers,
top_k]``; SGLang's ``meta_info.routed_experts`` = base64 of flat int32 with the same rows) import to fcr/1 with the
response rows as ``rollout.routed_experts``, and audit once the trainer's routes are added."""

import base64
import io

import numpy as np
import orjson
import pytest

from workers.fidelity.cli import main
from workers.routing.file import audit_file

PROMPT = [0, 40, 41, 42]
OUT = [20, 21, 22, 3]
LPS = [-0.1, -0.5, -0.2, -0.01]
L, K, E = 3, 2, 8


def _forwarded(seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([[rng.permutation(E)[:K] for _ in range(L)] for _ in range(len(PROMPT) + len(OUT) - 1)])


def _npy_b64(arr):
    buf = io.BytesIO()
    np.save(buf, arr.astype(np.int16), allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _vllm_exchange(routes):
    return {
        "request": {"model": "moe", "prompt": PROMPT, "logprobs": 0, "max_tokens": 4, "return_token_ids": True},
        "response": {
            "id": "cmpl-r",
            "object": "text_completion",
            "model": "moe",
            "choices": [
                {
                    "index": 0,
                    "text": "",
                    "finish_reason": "stop",
                    "prompt_token_ids": PROMPT,
                    "token_ids": OUT,
                    "routed_experts": routes,
                    "logprobs": {"tokens": [f"token_id:{i}" for i in OUT], "token_logprobs": LPS, "top_logprobs": None},
                }
            ],
            "usage": {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8},
        },
        "meta": {"trajectory_id": "tV", "step": 1, "headers": {"X-FCR-Call-Role": "policy"}},
    }


def _sglang_exchange(routes):
    return {
        "request": {
            "input_ids": PROMPT,
            "sampling_params": {"temperature": 1.0, "max_new_tokens": 4},
            "return_logprob": True,
            "return_routed_experts": True,
        },
        "response": {
            "text": "",
            "output_ids": OUT,
            "meta_info": {
                "id": "sg-1",
                "finish_reason": {"type": "stop"},
                "prompt_tokens": 4,
                "completion_tokens": 4,
                "output_token_logprobs": [[lp, t, None] for lp, t in zip(LPS, OUT)],
                "routed_experts": routes,
            },
        },
        "meta": {"trajectory_id": "tS", "step": 1, "headers": {"X-FCR-Call-Role": "policy"}},
    }


def _import(tmp_path, kind, exchanges, *extra):
    src, dst = tmp_path / f"{kind}.jsonl", tmp_path / f"{kind}.fcr.jsonl"
    src.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in exchanges))
    assert main(["import", kind, str(src), str(dst), *extra]) == 0
    return [orjson.loads(x) for x in dst.read_bytes().splitlines()]


def _with_trainer(tmp_path, recs, trainer_routes, replay):
    for r, t in zip(recs, trainer_routes):
        r["trainer"] = {
            "policy_version": 1,
            "logprobs": [x - 0.01 for x in r["rollout"]["logprobs"]],
            "routed_experts": t,
            "routing_replay": replay,
        }
    p = tmp_path / "joined.jsonl"
    p.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return p


def test_vllm_server_routes_import_and_audit(tmp_path):
    fw = _forwarded()
    (r,) = _import(tmp_path, "vllm", [_vllm_exchange(_npy_b64(fw))])
    want = fw[len(PROMPT) - 1 :].tolist()
    assert r["rollout"]["routed_experts"] == want and r["rollout"]["logprobs"] == LPS
    bad = [row[:] for row in want]
    bad[2] = [want[2][0], [e for e in range(E) if e not in want[2][1]][:K], want[2][2]]  # layer 1 of token 2
    res = audit_file(_with_trainer(tmp_path, [r], [bad], "R3"))
    assert res["replay"]["state"] == "FAIL" and res["replay"]["failed"][0]["layers_flipped"] == [1]
    assert res["pairs_flipped"] == 1 and res["coverage"]["tokens"] == 1.0


def test_sglang_meta_info_routes_import_with_the_layer_count(tmp_path):
    fw = _forwarded(1).astype("<i4")
    payload = base64.b64encode(fw.tobytes()).decode("ascii")
    (r,) = _import(tmp_path, "sglang", [_sglang_exchange(payload)], "--moe-layers", str(L))
    want = fw[len(PROMPT) - 1 :].tolist()
    assert r["rollout"]["routed_experts"] == want
    res = audit_file(_with_trainer(tmp_path, [r], [want], "R3"))
    assert res["replay"]["state"] == "PASS" and res["pairs_verified"] == len(OUT) * L
    # without the layer count the payload cannot be reshaped: no routes, and the reason is kept
    (r2,) = _import(tmp_path, "sglang", [_sglang_exchange(payload)])
    assert "routed_experts" not in r2["rollout"]
    assert "give the model's number of MoE layers" in r2["extra"]["routed_experts_unusable"]
    res = audit_file(_with_trainer(tmp_path, [r2], [want], "R3"))
    assert res["replay"]["state"] == "UNVERIFIABLE" and res["tokens_unverifiable"] == len(OUT)


def test_vllm_routes_of_the_wrong_length_are_kept_out_with_the_reason(tmp_path):
    (r,) = _import(tmp_path, "vllm", [_vllm_exchange(_npy_b64(_forwarded()[:3]))])
    assert "routed_experts" not in r["rollout"]
    assert "have 3 rows; expected prompt + response − 1 = 7" in r["extra"]["routed_experts_unusable"]


def test_join_attaches_the_trainers_routes_and_refuses_bad_ones(tmp_path):
    from workers.fidelity.join import JoinError, join

    fw = _forwarded(2)
    _import(tmp_path, "vllm", [_vllm_exchange(_npy_b64(fw))])
    want = fw[len(PROMPT) - 1 :].tolist()
    row = {"call_id": "cmpl-r", "logprobs": [x - 0.01 for x in LPS], "routed_experts": want, "routing_replay": "R3"}
    (tmp_path / "tr.jsonl").write_bytes(orjson.dumps(row) + b"\n")
    join(tmp_path / "vllm.fcr.jsonl", tmp_path / "tr.jsonl", tmp_path / "j.jsonl")
    res = audit_file(tmp_path / "j.jsonl")
    assert res["replay"]["state"] == "PASS" and res["replay"]["verified_calls"] == 1
    bad = dict(row, routed_experts=want[:-1])  # one token row short
    (tmp_path / "bad.jsonl").write_bytes(orjson.dumps(bad) + b"\n")
    with pytest.raises(JoinError, match="trainer.routed_experts: 3 token rows, but response.token_ids has 4 tokens"):
        join(tmp_path / "vllm.fcr.jsonl", tmp_path / "bad.jsonl", tmp_path / "j2.jsonl")


@pytest.mark.parametrize("declared", [{"routed_experts_start_len": 3}, {"routed_experts_dtype": "int16"}])
def test_sglang_routes_with_a_declared_offset_or_dtype_are_unusable(tmp_path, declared):
    # a payload covering rows from token 3 on (routed_experts_start_len), or packed as int16, read as full-sequence
    # int32 would give expert ids that mean nothing: refused by name (#27)
    fw = _forwarded(2)
    rows = fw[3:] if "routed_experts_start_len" in declared else fw
    dtype = "<i2" if "routed_experts_dtype" in declared else "<i4"
    ex = _sglang_exchange(base64.b64encode(rows.astype(dtype).tobytes()).decode("ascii"))
    ex["response"]["meta_info"].update(declared)
    (r,) = _import(tmp_path, "sglang", [ex], "--moe-layers", str(L))
    assert "routed_experts" not in r["rollout"]
    assert next(iter(declared)).replace("routed_experts_", "") in r["extra"]["routed_experts_unusable"]
    # the request may declare the offset instead of meta_info
    ex = _sglang_exchange(base64.b64encode(fw[3:].astype("<i4").tobytes()).decode("ascii"))
    ex["request"]["routed_experts_start_len"] = 3
    (r,) = _import(tmp_path, "sglang", [ex], "--moe-layers", str(L))
    assert "routed_experts" not in r["rollout"] and "start_len 3" in r["extra"]["routed_experts_unusable"]
