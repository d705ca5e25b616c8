"""The client library's log_step(..., rollout_routed_experts=…, trainer_routed_experts=…): [B, T, layers, top_k]
batches become the route columns of fcr-parquet/1, split by the response mask like every other array, and the routing
audit of the written file counts exactly the flips of the batch."""

import re
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client"))

from audit_portal_client.fcr import RecordMeta, step_table

from workers.fcr.validate import validate_file
from workers.routing.file import audit_file

B, T, L, K, E = 4, 9, 3, 2, 8


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    a = -rng.uniform(0.01, 3, (B, T))
    r = np.stack([[[rng.permutation(E)[:K] for _ in range(L)] for _ in range(T)] for _ in range(B)])
    t = r.copy()
    flips = rng.random((B, T, L)) < 0.2
    for b, tt, layer in zip(*np.nonzero(flips)):
        t[b, tt, layer] = [x for x in range(E) if x not in r[b, tt, layer]][:K]
    mask = np.ones((B, T), np.int8)
    mask[1, 4:6] = 0  # two turns in row 1
    mask[3, 6:] = 0  # padding in row 3
    return dict(
        rollout_logprobs=a,
        trainer_logprobs=a + rng.normal(0, 0.01, (B, T)).clip(-1, 0),
        response_ids=rng.integers(0, 100, (B, T)),
        response_mask=mask,
        rollout_routed_experts=r,
        trainer_routed_experts=t,
    ), flips & mask.astype(bool)[..., None]


def test_logged_routes_audit_to_the_batch_flips(tmp_path):
    b, flips = _batch()
    t = step_table(RecordMeta(run_id="r", model="moe"), 3, routing_replay="R2", num_experts=E, **b)
    path = tmp_path / "step.parquet"
    pq.write_table(t, path)
    rep = validate_file(path)
    assert rep["valid"] and rep["records_with_routes"] == t.num_rows == 5
    res = audit_file(path)
    m = b["response_mask"].astype(bool)
    assert res["pairs_verified"] == int(m.sum()) * L
    assert res["pairs_flipped"] == int(flips.sum()) > 0
    assert [row["flipped"] for row in res["per_layer"]] == flips.sum((0, 1)).tolist()
    assert res["tokens_flipped"] == int(flips.any(2).sum())
    assert res["calls_by_replay_mode"]["R2"] == 5 and res["replay"]["state"] == "NOT_DECLARED"


def test_r3_declared_with_replayed_routes_passes(tmp_path):
    b, _ = _batch(1)
    b["trainer_routed_experts"] = b["rollout_routed_experts"]
    pq.write_table(
        step_table(RecordMeta(run_id="r"), 0, routing_replay="R3", num_experts=E, **b), tmp_path / "s.parquet"
    )
    assert audit_file(tmp_path / "s.parquet")["replay"]["state"] == "PASS"


@pytest.mark.parametrize(
    "change, reason",
    [
        (
            lambda b: b.update(rollout_routed_experts=b["rollout_routed_experts"][:, :5]),
            "expected integer [B, T, layers",
        ),
        (lambda b: b.update(trainer_routed_experts=b["trainer_routed_experts"][..., :1]), "differ in shape"),
        (lambda b: b.update(rollout_routed_experts=b["rollout_routed_experts"] + 40000), "above 32767"),
        (lambda b: b.update(rollout_routed_experts=b["rollout_routed_experts"] * 1.0), "expected integer"),
    ],
)
def test_bad_route_batches_are_refused(change, reason):
    b, _ = _batch()
    change(b)
    with pytest.raises(ValueError, match=re.escape(reason)):
        step_table(RecordMeta(run_id="r"), 0, **b)


def test_unknown_replay_mode_is_refused():
    b, _ = _batch()
    with pytest.raises(ValueError, match="routing_replay"):
        step_table(RecordMeta(run_id="r"), 0, routing_replay="r3", **b)
