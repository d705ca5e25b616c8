"""NeMo RL's GRPO ``train_data`` → policy calls with routes, on the batch of nemo_rl_batch.py (built from reading
NeMo RL's code): one call per assistant turn, each response token with the route of the forward that produced it."""

import numpy as np
import pytest

from audit_portal_client.integrations.nemo_rl import log_train_data

from nemo_rl_batch import E, K, L, S, train_batch
from test_verl import new_run, spool_table, trainer_routes


def test_calls_per_assistant_turn_with_the_route_that_produced_each_token(tmp_path):
    data = train_batch()
    run = new_run(tmp_path)
    assert log_train_data(run, data, 4, routing_replay="R3", num_experts=E) == 3
    t = spool_table(run)
    rows = t.to_pylist()
    assert [r["response_token_ids"] for r in rows] == [
        data["input_ids"][0, 3:8].tolist(),
        data["input_ids"][1, 2:5].tolist(),
        data["input_ids"][1, 8:11].tolist(),
    ]
    # the second turn's prompt is the whole conversation before it, tool output included
    assert rows[2]["prompt_token_ids"] == data["input_ids"][1, :8].tolist()
    assert np.allclose(rows[0]["rollout_logprobs"], data["generation_logprobs"][0, 3:8])
    assert np.allclose(rows[2]["trainer_logprobs"], data["prev_logprobs"][1, 8:11])
    got = [np.asarray(r["rollout_routed_experts"]).reshape(-1, L, K) for r in rows]
    r = data["routed_experts"]
    assert np.array_equal(got[0], r[0, 2:7])  # token j ← row j − 1
    assert np.array_equal(got[1], r[1, 1:4])
    assert np.array_equal(got[2], r[1, 7:10])
    # the last answer token's row is j − 1 = 9 < input_length − 1 = 10: a real route, never the placeholder row 10
    assert not np.array_equal(got[2][-1], np.broadcast_to(np.arange(K), (L, K)))
    assert rows[0]["trainer_routed_experts"] is None  # R3: NeMo RL does not return the routes the trainer used
    assert all('"routing_replay":"R3"' in r["meta_json"] for r in rows)


def test_missing_routes_stay_missing_and_trainer_routes_are_read_when_named(tmp_path):
    data = train_batch(1)
    data["trainer_routes"] = data["routed_experts"].copy()
    data["trainer_routes"][0, 4, 1] = (data["trainer_routes"][0, 4, 1] + 1) % E  # one flipped selection
    run = new_run(tmp_path)
    log_train_data(run, data, 0, routing_replay="R3", trainer_routes_key="trainer_routes", num_experts=E)
    rows = spool_table(run).to_pylist()
    # row 6 of sample 1 (-1) routes token 7, a tool token: not logged; a -1 under an answer stays -1
    data2 = train_batch(2)
    data2["routed_experts"][1, 3] = -1  # produces answer token 4
    run2 = new_run(tmp_path / "b")
    log_train_data(run2, data2, 0)
    turn = np.asarray(spool_table(run2).to_pylist()[1]["rollout_routed_experts"]).reshape(-1, L, K)
    assert (turn[2] == -1).all() and (turn[:2] >= 0).all()
    trainer = trainer_routes(rows[0], L, K)
    rollout = np.asarray(rows[0]["rollout_routed_experts"]).reshape(-1, L, K)
    assert (trainer != rollout).any(axis=2).sum() == 1 and (trainer[2, 1] != rollout[2, 1]).any()


def test_a_batch_without_routes_or_prev_logprobs(tmp_path):
    data = train_batch()
    del data["routed_experts"]
    run = new_run(tmp_path)
    assert log_train_data(run, data, 1) == 3
    assert spool_table(run).column("rollout_routed_experts").null_count == 3
    del data["prev_logprobs"]
    with pytest.raises(ValueError, match="lacks prev_logprobs"):
        log_train_data(new_run(tmp_path / "x"), data, 1)


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("routed_experts", np.zeros((3, S - 1, L, K), np.int16), r"expected \[B, S, layers, top_k\] = \[3, 12"),
        ("input_lengths", np.array([8, 13, 6]), "input_lengths: expected 3 lengths in"),
        ("token_mask", np.zeros((3, S - 2)), "token_mask: expected"),
    ],
)
def test_bad_shapes_are_named(tmp_path, key, value, match):
    data = train_batch()
    data[key] = value
    with pytest.raises(ValueError, match=match):
        log_train_data(new_run(tmp_path), data, 0)
