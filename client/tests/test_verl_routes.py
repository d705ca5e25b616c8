"""verl's routed_experts [B, P + R, layers, top_k] (aligned with input_ids) → the response rows of each call."""

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from audit_portal_client.integrations.verl import log_dataproto  # noqa: E402 - after importorskip: these need torch

from test_verl import new_run, spool_table, trainer_routes, verl_batch  # noqa: E402 - after importorskip: these need torch

L, K, E = 3, 2, 8


def _routes(B, S, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.stack(
        [
            torch.stack([torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(L)]) for _ in range(S)])
            for _ in range(B)
        ]
    )


def test_routes_aligned_with_input_ids_become_response_rows(tmp_path):
    tensors, non_tensors, meta = verl_batch()
    B, P, R = 4, 5, 6
    tensors["routed_experts"] = _routes(B, P + R, 0)
    tensors["trainer_routes"] = _routes(B, P + R, 1)
    run = new_run(tmp_path)
    n = log_dataproto(
        run,
        SimpleNamespace(batch=tensors, non_tensor_batch=non_tensors, meta_info=meta),
        rollout_routes_key="routed_experts",
        trainer_routes_key="trainer_routes",
        routing_replay="R3",
        num_experts=E,
    )
    assert n == 4
    t = spool_table(run)
    flat = t.column("rollout_routed_experts").to_pylist()
    # row 1 kept its first 3 response tokens: routes of input positions P-1 .. P+1
    want = tensors["routed_experts"][1, P - 1 : P + 2].numpy()
    assert np.array_equal(np.asarray(flat[1]).reshape(-1, L, K), want)
    want_t = tensors["trainer_routes"][3, P - 1 : P].numpy()
    assert np.array_equal(trainer_routes(t.to_pylist()[3], L, K), want_t)
    assert t.column("routes_layers").to_pylist() == [L] * 4 and t.column("routes_top_k").to_pylist() == [K] * 4
    assert '"routing_replay":"R3"' in t.column("meta_json").to_pylist()[0]


def test_routes_of_the_wrong_length_are_refused(tmp_path):
    tensors, non_tensors, meta = verl_batch()
    tensors["routed_experts"] = _routes(4, 6, 0)
    with pytest.raises(ValueError, match=r"expected \[B, prompt \+ response = 11, layers, top_k\]"):
        log_dataproto(
            new_run(tmp_path),
            SimpleNamespace(batch=tensors, non_tensor_batch=non_tensors, meta_info=meta),
            rollout_routes_key="routed_experts",
        )
