"""MoE routing fields in fcr/1 and fcr-parquet/1: validated with the record and field named, constant layer count per
model, lossless JSONL ↔ Parquet round trip, and the routing audit equal on both encodings."""

from __future__ import annotations

import copy

import numpy as np
import orjson
import pytest

from workers.fcr.columnar import iter_records
from workers.fcr.parquet_write import Writer, jsonl_to_parquet, parquet_to_jsonl
from workers.fcr.validate import validate_file, validate_record
from workers.routing.file import RoutingFileError, audit_file
from workers.training.moe import experiment_records

B, T, L, K, E = 6, 12, 5, 3, 16


def _exp(seed=0, flip=0.1):
    rng = np.random.default_rng(seed)
    r = np.stack([[[rng.permutation(E)[:K] for _ in range(L)] for _ in range(T)] for _ in range(B)])
    t = r.copy()
    m = rng.random((B, T, L)) < flip
    t[m, 0] = (t[m].max(-1) + 1) % E  # a new expert in slot 0 (may repeat another: _valid drops those)
    lp = np.log(rng.uniform(0.05, 1, (B, T)))
    return {
        "tokens": rng.integers(0, 30, (B, 4 + T)),
        "prompt_len": 4,
        "rollout_routes": r,
        "trainer_routes": t,
        "replayed_routes": r.copy(),
        "rollout_logp": lp,
        "trainer_logp": np.minimum(lp + rng.normal(0, 0.05, (B, T)), 0.0),
        "replay_logp": lp,
        "n_experts": E,
    }


def _valid(exp):
    """Drop selections the random flips made invalid (an expert twice): record them as not recorded (−1)."""
    t = exp["trainer_routes"]
    s = np.sort(t, -1)
    dup = (s[..., 1:] == s[..., :-1]).any(-1)
    t[dup] = -1
    return exp


@pytest.fixture
def records():
    return experiment_records(_valid(_exp()), router_probs=True)


def _write(path, recs):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return path


def test_routes_validate_and_round_trip_through_parquet(tmp_path, records):
    for r in records:
        assert validate_record(r) == [] and validate_record(r, lint=False) == []
    src = _write(tmp_path / "run.jsonl", records)
    rep = validate_file(src)
    assert rep["valid"] and rep["records_with_routes"] == B
    jsonl_to_parquet(src, tmp_path / "run.parquet")
    back = [r for _, r in iter_records(tmp_path / "run.parquet")]
    assert back == records
    assert validate_file(tmp_path / "run.parquet")["records_with_routes"] == B
    parquet_to_jsonl(tmp_path / "run.parquet", tmp_path / "back.jsonl")
    assert [orjson.loads(x) for x in (tmp_path / "back.jsonl").read_bytes().splitlines()] == records
    a, b = audit_file(src), audit_file(tmp_path / "run.parquet")
    for k in ("flip_rate", "per_layer", "per_position", "attribution", "replay", "coverage"):
        assert a[k] == b[k]
    assert a["pairs_flipped"] > 0 and a["tokens_unverifiable"] > 0


def _set(rec, path, value):
    d = rec
    for p in path[:-1]:
        d = d[p]
    d[path[-1]] = value


@pytest.mark.parametrize(
    "path, value, field, reason",
    [
        (("rollout", "routed_experts"), "x", "rollout.routed_experts", "[tokens][layers][top_k] list"),
        (
            ("rollout", "routed_experts"),
            [[[1, 2, 3]] * L] * (T - 1),
            "rollout.routed_experts",
            f"{T - 1} token rows, but response.token_ids has {T} tokens",
        ),
        (("rollout", "routed_experts"), [[[1, 2, True]] * L] * T, "rollout.routed_experts", "must be ints, got bool"),
        (("rollout", "routed_experts"), [[[1, 2, 3.0]] * L] * T, "rollout.routed_experts", "must be ints, got float"),
        (
            ("rollout", "routed_experts"),
            [[[1, 2, 16]] * L] * T,
            "rollout.routed_experts[0][0]",
            "expert id 16 out of range: the model has 16 experts",
        ),
        (("rollout", "routed_experts"), [[[1, 2, 2]] * L] * T, "rollout.routed_experts[0][0]", "selected twice"),
        (
            ("rollout", "routed_experts"),
            [[[1, 2, 3]] * L, [[1, 2]] * L] + [[[1, 2, 3]] * L] * (T - 2),
            "rollout.routed_experts",
            "not a rectangular",
        ),
        (("trainer", "routed_experts"), [[[1, 2, 3, 4]] * L] * T, "trainer.routed_experts", "differs from"),
        (("rollout", "router_topk_probs"), [[[0.5, 0.5, 1.5]] * L] * T, "rollout.router_topk_probs[0][0]", "in [0, 1]"),
        (("rollout", "router_topk_probs"), [[[0.5, 0.5]] * L] * T, "rollout.router_topk_probs", "differs from"),
        (("trainer", "routing_replay"), "R4", "trainer.routing_replay", "expected none, R2, R3 or null"),
        (("model", "num_experts"), 0, "model.num_experts", "positive int"),
    ],
)
def test_bad_routes_are_refused_naming_the_field(records, path, value, field, reason):
    rec = copy.deepcopy(records[2])
    _set(rec, path, value)
    for lint in (True, False):  # the detailed path and the fast one
        issues = [i for i in validate_record(rec, line=3, lint=lint) if i.severity == "error"]
        assert issues, (path, value)
        assert issues[0].field == field and reason in issues[0].reason and issues[0].call_id == rec["call_id"]


def test_router_probs_without_routes_are_refused(records):
    rec = copy.deepcopy(records[0])
    rec["rollout"]["routed_experts"] = None
    rec["trainer"]["routed_experts"] = None
    (issue,) = validate_record(rec, lint=False)
    assert issue.field == "rollout.router_topk_probs" and "without rollout.routed_experts" in issue.reason


def test_layer_count_constant_within_a_model(tmp_path, records):
    bad = copy.deepcopy(records[3])
    for side in ("rollout", "trainer"):
        bad[side]["routed_experts"] = [row[:-1] for row in bad[side]["routed_experts"]]
    bad["rollout"]["router_topk_probs"] = [row[:-1] for row in bad["rollout"]["router_topk_probs"]]
    assert validate_record(bad) == []  # fine on its own …
    src = _write(tmp_path / "run.jsonl", records[:3] + [bad])
    rep = validate_file(src)  # … not after records of the same model with another layer count
    assert not rep["valid"] and rep["error_count"] == 1
    (e,) = rep["errors"]
    assert e["line"] == 4 and e["call_id"] == bad["call_id"]
    assert f"{L - 1} routed layers, but model 'tiny-moe' had {L} at line 1" in e["reason"]
    other = copy.deepcopy(bad)
    other["model"]["served_name"] = "another-moe"  # another model may have another layer count
    assert validate_file(_write(tmp_path / "two.jsonl", records[:3] + [other]))["valid"]
    # the routing audit agrees with the validator (#27): the same model refused at the same line, two models
    # audited each on its own, with counts per model
    with pytest.raises(RoutingFileError, match="line 4 .*layers, but earlier calls of this model have"):
        audit_file(src)
    res = audit_file(tmp_path / "two.jsonl")
    assert set(res["models"]) == {"tiny-moe", "another-moe"}
    assert (res["models"]["tiny-moe"]["layers"], res["models"]["another-moe"]["layers"]) == (L, L - 1)
    assert res["calls"] == sum(m["calls"] for m in res["models"].values()) and res["layers"] is None


def test_top_k_constant_within_a_model(tmp_path, records):
    bad = copy.deepcopy(records[3])
    for side in ("rollout", "trainer"):
        bad[side]["routed_experts"] = [[sel[:-1] for sel in row] for row in bad[side]["routed_experts"]]
    bad["rollout"]["router_topk_probs"] = [[p[:-1] for p in row] for row in bad["rollout"]["router_topk_probs"]]
    assert validate_record(bad) == []  # fine on its own …
    src = _write(tmp_path / "run.jsonl", records[:3] + [bad])
    rep = validate_file(src)  # … refused after records of the same model with another k, by both
    assert not rep["valid"] and "top_k" in rep["errors"][0]["reason"] and rep["errors"][0]["line"] == 4
    with pytest.raises(RoutingFileError, match="line 4 .*top_k"):
        audit_file(src)


def test_parquet_route_columns_whose_shape_does_not_add_up_are_named(tmp_path, records):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "run.parquet"
    with Writer(path) as w:
        for r in records:
            w.add(r)
    t = pq.read_table(path)
    i = t.column_names.index("routes_layers")
    t = t.set_column(i, "routes_layers", pa.array([L + 2] * B, pa.int16()))
    pq.write_table(t, path)
    rep = validate_file(path)
    assert not rep["valid"]
    assert rep["errors"][0]["field"] == "rollout.routed_experts"
    assert f"do not make [tokens, {L + 2}, {K}]" in rep["errors"][0]["reason"]


def test_expert_ids_above_int16_are_refused_by_the_parquet_writer(tmp_path, records):
    from workers.fcr.reader import FcrParseError

    rec = copy.deepcopy(records[0])
    rec["model"]["num_experts"] = 40000
    rec["rollout"]["routed_experts"][0][0][0] = 39999
    assert validate_record(rec, lint=False) == []
    with pytest.raises(FcrParseError, match="expert id above 32767"):
        with Writer(tmp_path / "x.parquet") as w:
            w.add(rec)
