"""fcr-parquet/1 (workers/fcr/columnar.py): the same run as JSONL and as Parquet gives the same records, the same
validation, the same certificate and the same fidelity audit; bad files are refused naming the row/column."""

from __future__ import annotations

import copy

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workers.certify.file import certify_file
from workers.fcr import columnar, parquet_write
from workers.fcr.__main__ import main as fcr_main
from workers.fcr.reader import iter_records as iter_jsonl
from workers.fcr.synth import SynthConfig, iter_run
from workers.fcr.validate import validate_file
from workers.fidelity import audit_file


def _records(**kw):
    cfg = dict(trajectories=30, seed=3, response_len=(8, 60), top_k=5)
    cfg.update(kw)
    return list(iter_run(SynthConfig(**cfg)))


def _write_jsonl(path, recs):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return path


@pytest.fixture
def run_pair(tmp_path):
    """A run with background calls, a sentinel, a null log-prob and a ragged top-K, as JSONL and as Parquet written
    in several row groups (the certificate reads across row-group boundaries)."""
    recs = _records()
    pol = [r for r in recs if r["role"] == "policy"]
    assert len(pol) > 10 and any(r["role"] != "policy" for r in recs)
    pol[2]["trainer"]["logprobs"][1] = -9999.0  # sentinel: a DATA_ERROR sequence with its reason
    pol[4]["rollout"]["logprobs"][0] = None  # null: not reported
    pol[6]["rollout"]["top_k"][0] = pol[6]["rollout"]["top_k"][0][:2]  # ragged K
    pol[8]["trainer"] = {k: v for k, v in pol[8]["trainer"].items() if k != "top_k"}  # one side without top-K
    src = _write_jsonl(tmp_path / "run.jsonl", recs)
    dst = tmp_path / "run.parquet"
    out = parquet_write.jsonl_to_parquet(src, dst, row_group_tokens=300)
    assert out["records"] == len(recs) and out["row_groups"] > 3
    return src, dst, recs


def test_round_trip_is_exact(run_pair, tmp_path):
    src, dst, recs = run_pair
    assert [r for _, r in columnar.iter_records(dst)] == [r for _, r in iter_jsonl(src)]
    back = tmp_path / "back.jsonl"
    parquet_write.parquet_to_jsonl(dst, back)
    assert [r for _, r in iter_jsonl(back)] == recs
    assert pq.ParquetFile(dst).schema_arrow.metadata[b"fcr.format"] == b"fcr-parquet/1"


def test_certificate_is_the_same_as_on_the_jsonl(run_pair):
    src, dst, _ = run_pair
    seqs_j, seqs_p = [], []
    a = certify_file(src, sequence_sink=seqs_j.extend, chunk_tokens=500)
    b = certify_file(dst, sequence_sink=seqs_p.extend, chunk_tokens=500)
    assert a == b
    assert seqs_j == seqs_p
    reasons = {e["reason"] for e in b["errors"]}
    assert any("sentinel" in r for r in reasons) and any("null" in r for r in reasons)
    assert a["summary"]["skipped"] and a["summary"]["sequences_certified"] > 10
    # budget mode pre-scans the longest policy response: same from the columns
    assert certify_file(src, budget=0.5) == certify_file(dst, budget=0.5)


def test_a_run_without_top_k_lists_certifies_like_its_jsonl(tmp_path):
    recs = _records(trajectories=10)
    for r in recs:
        for side in ("rollout", "trainer"):
            if isinstance(r.get(side), dict):
                r[side].pop("top_k", None)
    src = _write_jsonl(tmp_path / "run.jsonl", recs)
    dst = tmp_path / "run.parquet"
    parquet_write.jsonl_to_parquet(src, dst)
    a, b = certify_file(src), certify_file(dst)
    assert a == b and b["summary"]["sequences_certified"] > 0


def test_float32_log_probs_certify_like_their_jsonl_export(tmp_path):
    src = _write_jsonl(tmp_path / "run.jsonl", _records(trajectories=12))
    p32 = tmp_path / "run32.parquet"
    parquet_write.jsonl_to_parquet(src, p32, float_type="float32")
    assert pq.ParquetFile(p32).schema_arrow.field("rollout_logprobs").type == pa.list_(pa.float32())
    back = tmp_path / "back.jsonl"
    parquet_write.parquet_to_jsonl(p32, back)
    assert certify_file(p32) == certify_file(back)


def test_validation_and_audit_agree(run_pair):
    src, dst, _ = run_pair
    a, b = validate_file(src), validate_file(dst)
    assert b["format"] == "fcr-parquet/1" and a["format"] == "fcr/1"
    for k in (
        "valid",
        "records",
        "valid_records",
        "errors",
        "warnings",
        "runs",
        "steps",
        "calls_by_role",
        "policy_tokens",
        "response_tokens",
        "has_trainer_logprobs",
        "has_top_k",
    ):
        assert a[k] == b[k], k
    ra, rb = audit_file(src), audit_file(dst)
    for rep in (ra, rb):
        rep.pop("file")
        for c in rep["calls"]:
            c.pop("byte_offset")
    assert ra == rb


def _rewrite(src, dst, fn):
    """Copy a Parquet file through ``fn(table) -> table`` keeping its metadata."""
    t = pq.read_table(src)
    t = fn(t)
    pq.write_table(t, dst)
    return dst


def test_unknown_or_mistyped_column_and_foreign_version_are_refused_by_name(run_pair, tmp_path):
    _, dst, _ = run_pair
    extra = _rewrite(dst, tmp_path / "extra.parquet", lambda t: t.append_column("surprise", pa.array([1] * len(t))))
    r = validate_file(extra)
    assert not r["valid"] and "column 'surprise': unknown" in r["errors"][0]["reason"]
    mistyped = _rewrite(
        dst,
        tmp_path / "mistyped.parquet",
        lambda t: t.set_column(
            t.schema.get_field_index("step"), "step", pa.array([str(x) for x in t.column("step").to_pylist()])
        ),
    )
    r = validate_file(mistyped)
    assert "column 'step': expected int" in r["errors"][0]["reason"]
    old = _rewrite(dst, tmp_path / "v9.parquet", lambda t: t.replace_schema_metadata({b"fcr.format": b"fcr-parquet/9"}))
    r = validate_file(old)
    assert "'fcr-parquet/9' is not supported" in r["errors"][0]["reason"]
    # the certificate fails closed on the same file: one DATA_ERROR naming the reason, nothing certified
    c = certify_file(old)
    assert c["summary"]["sequences_certified"] == 0 and "not supported" in c["errors"][0]["reason"]


def test_a_row_that_is_not_a_record_is_named(run_pair, tmp_path):
    _, dst, recs = run_pair

    def break_row(t):
        meta = t.column("meta_json").to_pylist()
        meta[4] = "{not json"
        return t.set_column(t.schema.get_field_index("meta_json"), "meta_json", pa.array(meta))

    bad = _rewrite(dst, tmp_path / "bad.parquet", break_row)
    r = validate_file(bad)
    assert not r["valid"] and r["error_count"] == 1
    assert r["errors"][0]["line"] == 5 and r["errors"][0]["field"] == "meta_json"
    assert r["valid_records"] == len(recs) - 1
    with pytest.raises(columnar.FcrParseError, match="row 5|line 5"):
        list(columnar.iter_records(bad))


def test_topk_columns_of_different_shapes_are_a_data_error_for_that_row(run_pair, tmp_path):
    _, dst, _ = run_pair

    def shorten(t):
        lps = t.column("rollout_topk_logprobs").to_pylist()
        lps[0] = [x[:-1] for x in lps[0]]
        i = t.schema.get_field_index("rollout_topk_logprobs")
        return t.set_column(i, "rollout_topk_logprobs", pa.array(lps, t.schema.field(i).type))

    bad = _rewrite(dst, tmp_path / "shape.parquet", shorten)
    c = certify_file(bad)
    first = c["errors"][0]
    assert first["line"] == 1 and "rollout.top_k" in first["reason"] and "same shape" in first["reason"]
    assert validate_file(bad)["errors"][0]["field"] == "rollout.top_k"


def test_row_group_over_the_memory_limit_is_refused(run_pair, monkeypatch):
    _, dst, _ = run_pair
    monkeypatch.setenv("FCR_PARQUET_MAX_ROW_GROUP_BYTES", "1000")
    r = validate_file(dst)
    assert not r["valid"] and "above the limit of 1000" in r["errors"][0]["reason"]


def test_cli_converts_both_ways_and_refuses_an_invalid_record(tmp_path, capsys):
    recs = _records(trajectories=5)
    src = _write_jsonl(tmp_path / "run.jsonl", recs)
    assert fcr_main(["convert", str(src), str(tmp_path / "run.parquet")]) == 0
    assert fcr_main(["convert", str(tmp_path / "run.parquet"), str(tmp_path / "back.jsonl.gz")]) == 0
    assert [r for _, r in iter_jsonl(tmp_path / "back.jsonl.gz")] == recs
    broken = copy.deepcopy(recs)
    broken[2]["response"]["token_ids"][0] = -4
    bad = _write_jsonl(tmp_path / "bad.jsonl", broken)
    assert fcr_main(["convert", str(bad), str(tmp_path / "bad.parquet")]) == 1
    err = capsys.readouterr().err
    assert "line 3" in err and "response.token_ids[0]" in err and "non-negative" in err
    assert not (tmp_path / "bad.parquet").exists()


def test_records_are_built_a_slice_of_a_row_group_at_a_time(tmp_path):
    """Validation and the audit turn rows into Python records: for this one 43 k-token row group with top-K lists on
    both sides that is 94 MiB of Python objects at once (tracemalloc peak, measured); sliced, 19 MiB."""
    import tracemalloc

    recs = _records(trajectories=50, response_len=(300, 400), top_k=20)
    src = _write_jsonl(tmp_path / "run.jsonl", recs)
    dst = tmp_path / "run.parquet"
    parquet_write.jsonl_to_parquet(src, dst, row_group_tokens=1 << 16)
    tokens = sum(len(r["response"]["token_ids"]) for r in recs)
    assert tokens > 30_000 and pq.ParquetFile(dst).metadata.num_row_groups == 1
    slices = list(columnar.record_slices(pq.read_table(dst)))
    assert len(slices) > 4 and sum(n for _, n in slices) == len(recs)
    tracemalloc.start()
    n = sum(1 for _ in columnar.iter_records(dst))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n == len(recs)
    assert peak < 40 << 20, f"{peak / 2**20:.0f} MiB"
