"""Parquet validation by columns (workers/fcr/validate_columnar.py) gives the record-by-record verdict: the same
summary and the same errors and warnings, word for word and in row order, on a clean file and on files mutated in
each way the column checks look for (log-probs NaN or positive, lengths, nulls, negative ids, masks, top-K shapes,
missing or narrower columns, bad ids, meta_json that is not a record or that holds a per-token field)."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workers.fcr import parquet_write
from workers.fcr.synth import SynthConfig, iter_run
from workers.fcr.validate import validate_file


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A run in several row groups, with token strings and policy versions on some rows, a sentinel, a null
    log-prob, a ragged top-K and a record without trainer top-K."""
    tmp = tmp_path_factory.mktemp("columnar")
    recs = list(iter_run(SynthConfig(trajectories=12, seed=5, response_len=(4, 40), top_k=4)))
    pol = [r for r in recs if r["role"] == "policy"]
    for i, r in enumerate(recs[::3]):
        n = len(r["response"]["token_ids"])
        r["response"]["token_strings"] = [f"t{i}"] * n
        r["rollout"]["token_policy_versions"] = [i] * n
    pol[1]["trainer"]["logprobs"][1] = -9999.0
    pol[2]["rollout"]["logprobs"][0] = None
    pol[3]["rollout"]["top_k"][0] = pol[3]["rollout"]["top_k"][0][:2]
    pol[4]["trainer"] = {k: v for k, v in pol[4]["trainer"].items() if k != "top_k"}
    src = tmp / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    dst = tmp / "run.parquet"
    out = parquet_write.jsonl_to_parquet(src, dst, row_group_tokens=150)
    assert out["row_groups"] > 2
    return dst, pq.read_table(dst), len(recs)


def _both(path):
    cols = validate_file(path, max_errors=1000, max_warnings=1000)
    recs = validate_file(path, max_errors=1000, max_warnings=1000, by_columns=False)
    return cols, recs


def test_a_clean_file_gives_the_record_verdict(base, monkeypatch):
    from workers.fcr import validate_columnar

    path, _, n = base
    rebuilt = []
    real = validate_columnar.table_records

    def counting(table, first_row, **kw):
        rebuilt.append(table.num_rows)
        return real(table, first_row, **kw)

    monkeypatch.setattr(validate_columnar, "table_records", counting)
    cols, recs = _both(path)
    assert cols == recs
    # only the rows with a warning (the sentinel is none without lint; nothing here warns) are rebuilt as records
    assert sum(rebuilt) == 0
    assert cols["valid"] and cols["valid_records"] == n and cols["has_top_k"] and cols["response_tokens"] > 0


def _col(t, name, fn, typ=None):
    """``t`` with column ``name`` as ``fn(python list) -> python list`` (same Arrow type unless ``typ``)."""
    i = t.schema.get_field_index(name)
    vals = fn(t.column(name).to_pylist())
    return t.set_column(i, name, pa.array(vals, typ or t.schema.field(i).type))


def _row(r, fn):
    def apply(vals):
        vals[r] = fn(vals[r])
        return vals

    return apply


def _meta(r, fn):
    def apply(vals):
        vals[r] = orjson.dumps(fn(orjson.loads(vals[r]))).decode()
        return vals

    return apply


def _set(path_value):
    def f(m):
        for path, value in path_value:
            d = m
            for k in path[:-1]:
                d = d.setdefault(k, {})
            d[path[-1]] = value
        return m

    return f


def _at(i, v):
    def f(xs):
        xs = list(xs)
        xs[i] = v
        return xs

    return f


def _first_with(t, name):
    return next(i for i, v in enumerate(t.column(name).to_pylist()) if v)


MUTATIONS = {
    "rollout log-prob NaN": lambda t: _col(t, "rollout_logprobs", _row(3, _at(1, float("nan")))),
    "rollout log-prob positive": lambda t: _col(t, "rollout_logprobs", _row(5, _at(0, 0.5))),
    "trainer log-prob positive": lambda t: _col(
        t, "trainer_logprobs", _row(_first_with(t, "trainer_logprobs"), _at(2, 3.0))
    ),
    "rollout log-probs too short": lambda t: _col(t, "rollout_logprobs", _row(7, lambda xs: xs[:-1])),
    "rollout log-probs null": lambda t: _col(t, "rollout_logprobs", _row(8, lambda xs: None)),
    "trainer log-probs too long": lambda t: _col(
        t, "trainer_logprobs", _row(_first_with(t, "trainer_logprobs"), lambda xs: xs + [-1.0])
    ),
    "negative response id": lambda t: _col(t, "response_token_ids", _row(2, _at(0, -4))),
    "null prompt id": lambda t: _col(t, "prompt_token_ids", _row(9, _at(0, None))),
    "response ids null": lambda t: _col(t, "response_token_ids", _row(10, lambda xs: None)),
    "token string null": lambda t: _col(t, "response_token_strings", _row(0, _at(0, None))),
    "token strings too short": lambda t: _col(t, "response_token_strings", _row(3, lambda xs: xs[1:])),
    "policy versions too short": lambda t: _col(t, "rollout_token_policy_versions", _row(6, lambda xs: xs[1:])),
    "loss mask 2": lambda t: _col(t, "trainer_loss_mask", _row(_first_with(t, "trainer_loss_mask"), _at(0, 2))),
    "loss mask null value": lambda t: _col(
        t, "trainer_loss_mask", _row(_first_with(t, "trainer_loss_mask"), _at(1, None))
    ),
    "top-K negative id": lambda t: _col(t, "rollout_topk_ids", _row(4, _at(1, [-3, 5]))),
    "top-K null log-prob": lambda t: _col(t, "rollout_topk_logprobs", _row(4, lambda xs: [[None] + x[1:] for x in xs])),
    "top-K null position": lambda t: _col(
        t, "trainer_topk_ids", _row(_first_with(t, "trainer_topk_ids"), _at(0, None))
    ),
    "top-K shapes differ": lambda t: _col(t, "rollout_topk_logprobs", _row(6, lambda xs: [x[:-1] for x in xs])),
    "top-K one side null": lambda t: _col(t, "rollout_topk_logprobs", _row(11, lambda xs: None)),
    "top-K too short": lambda t: _col(
        _col(t, "rollout_topk_ids", _row(12, lambda xs: xs[1:])), "rollout_topk_logprobs", _row(12, lambda xs: xs[1:])
    ),
    "required column missing": lambda t: t.drop_columns(["rollout_logprobs"]),
    "top-K ids column missing": lambda t: t.drop_columns(["rollout_topk_ids"]),
    "narrower int columns": lambda t: _col(
        _col(t, "step", lambda v: v, pa.int32()), "response_token_ids", lambda v: v, pa.list_(pa.int32())
    ),
    "float32 log-probs": lambda t: _col(t, "rollout_logprobs", lambda v: v, pa.list_(pa.float32())),
    "float16 log-probs": lambda t: _col(t, "rollout_logprobs", lambda v: v, pa.list_(pa.float16())),
    "empty call id": lambda t: _col(t, "call_id", _row(3, lambda v: "")),
    "duplicate call id": lambda t: _col(t, "call_id", _row(4, lambda v: t.column("call_id")[3].as_py())),
    "null run id": lambda t: _col(t, "run_id", _row(5, lambda v: None), pa.string()),
    "meta not JSON": lambda t: _col(t, "meta_json", _row(2, lambda v: "{nope")),
    "meta a list": lambda t: _col(t, "meta_json", _row(3, lambda v: "[1, 2]")),
    "meta wrong schema": lambda t: _col(t, "meta_json", _meta(4, _set([(("schema",), "fcr/2")]))),
    "meta bad role source": lambda t: _col(t, "meta_json", _meta(5, _set([(("role_source",), "guess")]))),
    "meta engine enum": lambda t: _col(t, "meta_json", _meta(6, _set([(("engine", "api"), "telepathy")]))),
    "meta holds ids of a null column": lambda t: _col(
        _col(t, "response_token_ids", _row(7, lambda v: None)),
        "meta_json",
        _meta(7, _set([(("response", "token_ids"), [1, 2, 3])])),
    ),
    "meta holds policy versions of a null column": lambda t: _col(
        t, "meta_json", _meta(8, _set([(("rollout", "token_policy_versions"), [1])]))
    ),
    "meta logprob_unverified": lambda t: _col(
        t, "meta_json", _meta(9, _set([(("rollout", "logprob_unverified"), [[0, 99, "engine_bug"]])]))
    ),
    "meta num_experts": lambda t: _col(t, "meta_json", _meta(10, _set([(("model", "num_experts"), 8)]))),
    "meta sampling not an object": lambda t: _col(t, "meta_json", _meta(11, _set([(("sampling",), 5)]))),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_mutated_file_gives_the_record_verdict(base, tmp_path, name):
    path, table, _ = base
    mutated = MUTATIONS[name](table).replace_schema_metadata(table.schema.metadata)
    dst = tmp_path / "m.parquet"
    pq.write_table(mutated, dst, row_group_size=7)
    cols, recs = _both(dst)
    clean = validate_file(path, max_errors=1000, max_warnings=1000)
    # the mutation shows (an error or a warning more, or another summary), and both paths say the same of it
    # (a NaN log-prob, narrower types and num_experts without routes are fine: they only take other paths)
    if name not in (
        "narrower int columns",
        "float32 log-probs",
        "float16 log-probs",
        "rollout log-prob NaN",
        "meta num_experts",
    ):
        assert (cols["errors"], cols["warnings"]) != (clean["errors"], clean["warnings"]), name
    assert cols == recs


@pytest.mark.parametrize("seed", range(12))
def test_several_mutations_in_one_file_give_the_record_verdict(base, tmp_path, seed):
    """Mutations together (flagged rows next to each other and to clean ones, in one row group or several, the record
    path's runs of consecutive rows), with row groups of a size drawn per file."""
    import random

    path, table, _ = base
    rnd = random.Random(seed)
    names = sorted(MUTATIONS)
    t = table
    for name in rnd.sample(names, 4):
        try:
            t = MUTATIONS[name](t)
        except (KeyError, IndexError, StopIteration, pa.ArrowException):  # a column an earlier mutation dropped
            continue
    dst = tmp_path / "m.parquet"
    pq.write_table(t.replace_schema_metadata(table.schema.metadata), dst, row_group_size=rnd.choice([1, 3, 16, 200]))
    cols, recs = _both(dst)
    assert cols == recs
