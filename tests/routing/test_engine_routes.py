"""Routed experts in the shapes vLLM and SGLang return them (fixtures written here from the engines' code: vLLM's
server sends base64 of an .npy array [prompt + completion − 1, layers, top_k]; SGLang's meta_info sends base64 of flat
int32 bytes with one row per forwarded token) → the response rows of fcr/1, and the routing audit on them."""

import base64
import io

import numpy as np
import pytest

from workers.routing import RoutingAudit
from workers.routing.engines import EngineRoutesError, sglang_response_routes, vllm_response_routes

P, T, L, K, E = 5, 7, 3, 2, 8


def _forwarded(seed=0, dtype=np.int16):
    rng = np.random.default_rng(seed)
    return np.stack([[rng.permutation(E)[:K] for _ in range(L)] for _ in range(P + T - 1)]).astype(dtype)


def _npy_b64(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def test_vllm_server_offline_and_list_forms_give_the_response_rows():
    arr = _forwarded()
    want = arr[P - 1 :].tolist()  # row P+t−1 produced response token t
    assert vllm_response_routes(_npy_b64(arr), P, T) == want  # choices[i].routed_experts (server)
    assert vllm_response_routes(arr, P, T) == want  # CompletionOutput.routed_experts (offline)
    assert vllm_response_routes(arr.tolist(), P, T) == want
    full = np.concatenate([arr, arr[-1:]])  # a writer that keeps a row for the last token too
    assert vllm_response_routes(full, P, T) == want
    assert vllm_response_routes(arr[P - 1 :], P, T) == want  # response rows only


def test_sglang_flat_int32_payload_needs_the_layer_count():
    arr = _forwarded(dtype=np.int32)
    payload = base64.b64encode(arr.astype("<i4").tobytes()).decode("ascii")
    assert sglang_response_routes(payload, P, T, num_layers=L) == arr[P - 1 :].tolist()
    with pytest.raises(EngineRoutesError, match="give the model's number of MoE layers"):
        sglang_response_routes(payload, P, T)
    assert sglang_response_routes(arr.tolist(), P, T) == arr[P - 1 :].tolist()  # older servers: a nested list


@pytest.mark.parametrize(
    "call, reason",
    [
        (lambda: vllm_response_routes("not base64!", P, T), "not valid base64"),
        (lambda: vllm_response_routes(base64.b64encode(b"junk").decode(), P, T), "not an .npy array"),
        (lambda: vllm_response_routes(_forwarded()[:4], P, T), "have 4 rows; expected prompt + response − 1 = 11"),
        (lambda: vllm_response_routes(np.zeros((11, 3), int), P, T), "expected [tokens, layers, top_k]"),
        (lambda: vllm_response_routes(np.zeros((11, 3, 2)), P, T), "integer expert ids"),
        (lambda: vllm_response_routes({"a": 1}, P, T), "got dict"),
        (
            lambda: sglang_response_routes(base64.b64encode(b"abc").decode(), P, T, num_layers=L),
            "whole number of int32",
        ),
        (
            lambda: sglang_response_routes(base64.b64encode(np.zeros(7, "<i4").tobytes()).decode(), P, T, num_layers=L),
            "7 values do not make [11, 3, top_k]",
        ),
    ],
)
def test_bad_payloads_are_refused_with_the_reason(call, reason):
    with pytest.raises(EngineRoutesError) as e:
        call()
    assert reason in str(e.value)


def test_engine_routes_audit_against_a_trainer_recompute():
    arr = _forwarded()
    rollout = np.asarray(vllm_response_routes(_npy_b64(arr), P, T))
    trainer = rollout.copy()
    trainer[2, 1] = [x for x in range(E) if x not in rollout[2, 1]][:K]  # one flipped (token, layer)
    a = RoutingAudit()
    a.add_call("vllm-0", rollout=rollout, trainer=trainer, replay="R3", n_experts=E, n_tokens=T)
    res = a.result()
    assert res["pairs_flipped"] == 1 and res["per_layer"][1]["flipped"] == 1
    assert res["replay"]["failed"] == [{"call_id": "vllm-0", "pairs_flipped": 1, "layers_flipped": [1]}]
