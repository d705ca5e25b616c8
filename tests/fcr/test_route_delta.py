"""The trainer's MoE routes in fcr-parquet/1 as their difference from the rollout's (column trainer_routes_delta):
written whenever both sides are there with one shape, read back to the same routes (flips, reordered selections,
selections not recorded on either side), the client's encoding decoded by the engine, bad delta columns named, and
the column far smaller than a whole trainer column when the trainer mostly agrees."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workers.fcr import route_delta
from workers.fcr.columnar import iter_records
from workers.fcr.parquet_write import Writer
from workers.fcr.validate import validate_file
from workers.training.moe import experiment_records

from .test_routes_format import _exp, _valid

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client"))
from audit_portal_client.fcr import ROUTES_SAME, RecordMeta, route_delta as client_delta, step_table

B, T, L, K, E = 6, 12, 5, 3, 16


def write(path, recs):
    with Writer(path) as w:
        for r in recs:
            w.add(r)
    return path


@pytest.fixture
def records():
    recs = experiment_records(_valid(_exp(flip=0.1)))
    recs[1]["trainer"]["routed_experts"][2][1] = recs[1]["trainer"]["routed_experts"][2][1][::-1]  # reordered
    recs[2]["rollout"]["routed_experts"][0][0] = [-1] * K  # not recorded by the engine …
    recs[2]["trainer"]["routed_experts"][0][0] = [-1] * K  # … nor by the trainer
    recs[3]["rollout"]["routed_experts"][1][3] = [-1] * K  # recorded by the trainer only
    return recs


def test_trainer_routes_are_stored_as_a_difference_and_read_back_unchanged(tmp_path, records):
    path = write(tmp_path / "run.parquet", records)
    t = pq.read_table(path)
    assert t.column("trainer_routed_experts").null_count == B  # not stored whole …
    assert t.column(route_delta.COLUMN).null_count == 0  # … but as a difference
    assert [r for _, r in iter_records(path)] == records
    back = [r for _, r in iter_records(path, numpy_routes=True)]
    for rec, got in zip(records, back):
        assert np.array_equal(got["trainer"]["routed_experts"], np.asarray(rec["trainer"]["routed_experts"]))
    assert validate_file(path)["valid"]


def test_rows_without_two_comparable_sides_are_written_whole(tmp_path, records):
    only_trainer = copy.deepcopy(records[0])
    only_trainer["rollout"]["routed_experts"] = None
    path = write(tmp_path / "one.parquet", [only_trainer, records[1]])
    t = pq.read_table(path)
    assert t.column("trainer_routed_experts").to_pylist()[0] is not None
    assert t.column(route_delta.COLUMN).to_pylist() == [None, t.column(route_delta.COLUMN).to_pylist()[1]]
    back = [r for _, r in iter_records(path)]
    assert back[0]["trainer"]["routed_experts"] == only_trainer["trainer"]["routed_experts"]
    assert "routed_experts" not in back[0]["rollout"] and back[1] == records[1]  # null routes read back as absent


def test_negative_trainer_ids_come_back_as_not_recorded():
    r = np.array([[[1, 2]], [[3, 4]]])
    t = np.array([[[1, 2]], [[-7, -40000]]])
    back, problem = route_delta.decode(r.reshape(-1), route_delta.encode(r, t))
    assert problem is None and back.tolist() == [1, 2, -1, -1]


@pytest.mark.parametrize(
    "change, reason",
    [
        (
            lambda t: t.set_column(
                t.column_names.index("rollout_routed_experts"),
                "rollout_routed_experts",
                pa.nulls(t.num_rows, pa.list_(pa.int16())),
            ),
            "which is absent",
        ),
        (
            lambda t: t.set_column(
                t.column_names.index(route_delta.COLUMN),
                route_delta.COLUMN,
                pa.array([[ROUTES_SAME] * 3] * t.num_rows, pa.list_(pa.int16())),
            ),
            "a difference needs",
        ),
        (
            lambda t: t.set_column(
                t.column_names.index("trainer_routed_experts"),
                "trainer_routed_experts",
                t.column("rollout_routed_experts"),
            ),
            "given both whole and as",
        ),
    ],
)
def test_a_delta_that_cannot_be_decoded_is_named(tmp_path, records, change, reason):
    path = write(tmp_path / "run.parquet", records[:2])
    pq.write_table(change(pq.read_table(path)), path)
    rep = validate_file(path)
    assert not rep["valid"] and rep["errors"][0]["field"] == "trainer.routed_experts"
    assert reason in rep["errors"][0]["reason"]


def test_the_clients_encoding_is_what_the_engine_decodes(tmp_path):
    rng = np.random.default_rng(5)
    r = np.stack([[[rng.permutation(E)[:K] for _ in range(L)] for _ in range(T)] for _ in range(2)])
    t = r.copy()
    t[0, 3, 1] = t[0, 3, 1][::-1]
    t[1, 5, 4, 0] = next(x for x in range(E) if x not in t[1, 5, 4])
    t[1, 6] = -1
    assert client_delta(r, t).tolist() == route_delta.encode(r, t).reshape(r.shape).tolist()
    lp = -rng.uniform(0.1, 2, (2, T))
    table = step_table(
        RecordMeta(run_id="r"),
        0,
        rollout_logprobs=lp,
        trainer_logprobs=lp,
        response_mask=np.ones((2, T)),
        response_ids=rng.integers(0, 50, (2, T)),
        rollout_routed_experts=r,
        trainer_routed_experts=t,
        routing_replay="R3",
        num_experts=E,
    )
    pq.write_table(table, tmp_path / "c.parquet")
    back = [rec["trainer"]["routed_experts"] for _, rec in iter_records(tmp_path / "c.parquet", numpy_routes=True)]
    assert np.array_equal(np.stack(back), t)


def test_the_difference_is_much_smaller_than_a_whole_trainer_column(tmp_path):
    """Random ids barely compress, so a whole trainer column costs about what the rollout's does; at 1 % flipped
    selections the difference costs a small fraction of that (bench/routing.py measures the real figures)."""
    rng = np.random.default_rng(0)
    n, layers, k, e = 4000, 8, 4, 64
    r = np.argsort(rng.random((n, layers, e)), axis=-1)[..., :k].astype(np.int16)
    t = r.copy()
    flip = rng.random((n, layers)) < 0.01
    t[flip, 0] = (t[flip].max(-1) + 1) % e
    delta = route_delta.encode(r, t)

    def size(values):
        pq.write_table(
            pa.table({"c": pa.array([values.reshape(-1)], pa.list_(pa.int16()))}),
            tmp_path / "s.parquet",
            compression="zstd",
        )
        return (tmp_path / "s.parquet").stat().st_size

    whole, diff = size(t), size(delta)
    assert diff * 10 < whole, (diff, whole)


def test_ids_below_int16_stay_not_recorded_on_both_sides(tmp_path, records):
    """−40000 on both sides must not wrap into the same int16 expert id (25536) and read as agreement."""
    from workers.routing.file import audit_file

    rec = copy.deepcopy(records[0])
    rec["rollout"]["routed_experts"][0][0] = [-40000] * K
    rec["trainer"]["routed_experts"][0][0] = [-40000] * K
    path = write(tmp_path / "run.parquet", [rec])
    (back,) = [r for _, r in iter_records(path)]
    assert back["rollout"]["routed_experts"][0][0] == [-1] * K == back["trainer"]["routed_experts"][0][0]
    res = audit_file(path)
    assert res["pairs_verified"] == T * L - 1  # that (token, layer) is unverifiable, not "agreeing"
    lp = -np.ones((1, 2))
    r = np.array([[[[-40000, -40000]], [[1, 2]]]])
    table = step_table(
        RecordMeta(run_id="r"),
        0,
        rollout_logprobs=lp,
        trainer_logprobs=lp,
        response_mask=np.ones((1, 2)),
        response_ids=np.array([[3, 4]]),
        rollout_routed_experts=r,
        trainer_routed_experts=r,
    )
    assert table.column("rollout_routed_experts").to_pylist() == [[-1, -1, 1, 2]]
