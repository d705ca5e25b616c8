"""Validation in pieces merges into the one-pass summary: for any cut of a file into pieces, in any order, the merged
summary equals validate_file's — duplicates across pieces, a model's layer count established in an earlier piece,
malformed and blank lines, error and warning caps, run ids past the cap, and a reading stopped by a read limit."""

from __future__ import annotations

import copy
import random

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.fcr.chunks import chunk_ranges
from workers.fcr.synth import SynthConfig, iter_run
from workers.fcr.validate import validate_file
from workers.fcr.validate_pieces import merge_pieces, validate_piece

BASE = list(iter_run(SynthConfig(trajectories=6, seed=5, response_len=(3, 9), top_k=2, steps=4)))


def routed(rec, layers, model="moe-a"):
    rec = copy.deepcopy(rec)
    n = len(rec["response"]["token_ids"])
    rec["model"] = {**rec.get("model", {}), "served_name": model}
    rec["rollout"]["routed_experts"] = [[[1, 2] for _ in range(layers)] for _ in range(n)]
    return rec


def build(rng: random.Random) -> list[bytes]:
    """A log with every file-level situation in random places."""
    recs = [copy.deepcopy(r) for r in BASE]
    lines = [orjson.dumps(r) for r in recs]
    for _ in range(rng.randint(0, 4)):  # a call repeated later in the file
        lines.insert(rng.randint(0, len(lines)), rng.choice(lines[: max(1, len(lines) // 2)]))
    for _ in range(rng.randint(0, 4)):  # routed records of two models, layer counts sometimes disagreeing
        model = rng.choice(["moe-a", "moe-b"])
        lines.insert(rng.randint(0, len(lines)), orjson.dumps(routed(rng.choice(recs), rng.choice([2, 2, 3]), model)))
    for bad in rng.sample([b"{not json", b"", b"   ", b"[1, 2]", orjson.dumps({"schema": "fcr/1"})], rng.randint(0, 3)):
        lines.insert(rng.randint(0, len(lines)), bad)
    for _ in range(rng.randint(0, 4)):  # records declaring run parameters, sometimes disagreeing with earlier ones
        r = copy.deepcopy(rng.choice(recs))
        r[rng.choice(["run_config", "run_tags"])] = rng.choice([{"lr": 1}, {"lr": 2}, ["a"], ["a", "b"], None])
        lines.insert(rng.randint(0, len(lines)), orjson.dumps(r))
    for _ in range(rng.randint(0, 2)):  # another run id
        r = copy.deepcopy(rng.choice(recs))
        r["run_id"] = f"other-{rng.randint(0, 3)}"
        lines.insert(rng.randint(0, len(lines)), orjson.dumps(r))
    return lines


def pieces_of(path, target, order_seed, **caps):
    chunks = chunk_ranges(path, target)
    pieces = [validate_piece(path, c, **caps) for c in chunks]
    random.Random(order_seed).shuffle(pieces)  # stored in whatever order their workers finished
    return chunks, pieces


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), target=st.integers(200, 6000), caps=st.sampled_from([(20, 20), (2, 1), (0, 0)]))
def test_merged_pieces_equal_one_pass(tmp_path_factory, seed, target, caps):
    path = tmp_path_factory.mktemp("pieces") / "run.jsonl"
    path.write_bytes(b"\n".join(build(random.Random(seed))) + b"\n")
    max_errors, max_warnings = caps
    chunks, pieces = pieces_of(path, target, seed, max_errors=max_errors, max_warnings=max_warnings)
    merged = merge_pieces(pieces, path=path, max_errors=max_errors, max_warnings=max_warnings)
    assert merged == validate_file(path, max_errors=max_errors, max_warnings=max_warnings), len(chunks)


def test_a_later_piece_is_judged_by_the_layer_count_an_earlier_piece_established(tmp_path):
    lines = (
        [orjson.dumps(routed(BASE[0], 2))]
        + [orjson.dumps(r) for r in BASE[1:]]
        + [orjson.dumps(routed(BASE[1], 3)), orjson.dumps(routed(BASE[2], 2))]
    )
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    chunks = chunk_ranges(path, len(lines[0]) + 1)
    assert len(chunks) >= 3
    read_again = []
    pieces = [validate_piece(path, c) for c in chunks]

    def again(index, known, known_params=None):
        read_again.append((index, known))
        return validate_piece(path, chunks[index], known_layers=known, known_params=known_params)

    merged = merge_pieces(pieces, path=path, read_again=again)
    assert merged == validate_file(path)
    assert merged["error_count"] == 1 and "had 2 at line 1" in merged["errors"][0]["reason"]
    assert [i for i, _ in read_again] == [chunks[-1].index]  # only the piece that disagreed was read twice


def test_duplicates_across_pieces_are_warned_at_their_later_line(tmp_path):
    lines = [orjson.dumps(r) for r in BASE] + [orjson.dumps(BASE[0])]
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    merged = merge_pieces([validate_piece(path, c) for c in chunk_ranges(path, 300)], path=path)
    assert merged["duplicate_call_ids"] == 1 and merged["warnings"][-1]["line"] == len(lines)
    assert merged == validate_file(path)


def test_a_reading_stopped_by_a_read_limit_ends_the_file_there(tmp_path, monkeypatch):
    monkeypatch.setenv("AUDIT_MAX_LINE_BYTES", "4096")
    lines = [orjson.dumps(r) for r in BASE]
    lines.insert(len(lines) // 2, b'{"pad": "' + b"x" * 5000 + b'"}')
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    merged = merge_pieces([validate_piece(path, c) for c in chunk_ranges(path, 500)], path=path)
    one_pass = validate_file(path)
    assert "AUDIT_MAX_LINE_BYTES" in one_pass["errors"][-1]["reason"]
    merged.pop("bytes_read"), one_pass.pop("bytes_read")  # where each read stopped depends on its buffering
    assert merged == one_pass


@pytest.mark.parametrize("n_runs", [3, 1005])
def test_run_ids_keep_the_first_thousand_in_file_order(tmp_path, n_runs):
    recs = []
    for i in range(n_runs):
        r = copy.deepcopy(BASE[i % len(BASE)])
        r["run_id"], r["call_id"] = f"run-{i:05d}", f"c{i}"
        recs.append(orjson.dumps(r))
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(recs[::-1]) + b"\n")  # file order is not sorted order
    merged = merge_pieces([validate_piece(path, c) for c in chunk_ranges(path, 50_000)], path=path)
    assert merged == validate_file(path) and merged["runs_truncated"] is (n_runs > 1000)


@pytest.mark.parametrize("corrupt", [False, True])
def test_parquet_row_groups_merge_and_a_bad_row_group_ends_the_file(tmp_path, corrupt):
    import pyarrow.parquet as pq

    from workers.fcr import parquet_write

    src, dst = tmp_path / "run.jsonl", tmp_path / "run.parquet"
    src.write_bytes(b"\n".join(orjson.dumps(r) for r in BASE + BASE[:2]) + b"\n")  # two calls repeated
    parquet_write.jsonl_to_parquet(src, dst, row_group_tokens=20)
    groups = pq.ParquetFile(dst).metadata.num_row_groups
    assert groups >= 4
    if corrupt:  # garbage over a middle row group's first data page
        offset = pq.ParquetFile(dst).metadata.row_group(groups // 2).column(0).data_page_offset
        with open(dst, "r+b") as fh:
            fh.seek(offset)
            fh.write(b"\xff" * 64)
    chunks = chunk_ranges(dst, 1)  # a piece per row group
    assert len(chunks) == groups
    merged = merge_pieces([validate_piece(dst, c) for c in chunks][::-1], path=dst)
    one_pass = validate_file(dst)
    assert merged == one_pass
    assert one_pass["valid"] is not corrupt


def test_a_later_piece_is_judged_by_the_run_parameters_an_earlier_piece_established(tmp_path):
    first, second = copy.deepcopy(BASE[0]), copy.deepcopy(BASE[1])
    first["run_config"], second["run_config"] = {"lr": 1}, {"lr": 2}
    third = copy.deepcopy(BASE[2])
    third["run_config"] = {"lr": 2}  # agrees with its own piece's first value, not with the run's
    lines = [orjson.dumps(first)] + [orjson.dumps(r) for r in BASE[3:]] + [orjson.dumps(second), orjson.dumps(third)]
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    merged = merge_pieces([validate_piece(path, c) for c in chunk_ranges(path, len(lines[0]) + 1)], path=path)
    assert merged == validate_file(path)
    assert [e["line"] for e in merged["errors"]] == [len(lines) - 1, len(lines)]  # both later records, not only one
    assert merged["run_params"] == {
        first["run_id"]: {"run_config": {"value": {"lr": 1}, "line": 1, "call_id": first["call_id"]}}
    }
