"""The one door for reading a run log (workers/fcr/source.py): what a file is comes from its bytes, a piece reads only
its part with whole-file numbers, and the limits a source is given reach every reader behind it."""

from __future__ import annotations

import gzip

import orjson
import pytest

from workers.fcr import parquet_write
from workers.fcr.chunks import chunk_ranges
from workers.fcr.reader import FcrLimitError, FcrParseError, ReadLimits
from workers.fcr.source import RunLogSource
from workers.fcr.synth import SynthConfig, iter_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("source")
    recs = list(iter_run(SynthConfig(trajectories=6, seed=3)))
    data = b"".join(orjson.dumps(r) + b"\n" for r in recs)
    plain, packed, table = tmp / "run.bin", tmp / "run.jsonl", tmp / "run.txt"  # names say nothing
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    parquet_write.jsonl_to_parquet(plain, table, row_group_tokens=300)
    return recs, plain, packed, table


def test_the_kind_comes_from_the_bytes_and_every_kind_gives_the_same_records(run):
    recs, plain, packed, table = run
    kinds = [(RunLogSource(p).format, RunLogSource(p).compressed) for p in (plain, packed, table)]
    assert kinds == [("fcr/1", False), ("fcr/1", True), ("fcr-parquet/1", False)]
    for path in (plain, packed, table):
        assert [r for _, r in RunLogSource(path).records()] == recs


@pytest.mark.parametrize("which", ["plain", "table"])
def test_pieces_cover_the_file_once_with_whole_file_numbers(run, which):
    recs, plain, _, table = run
    path = plain if which == "plain" else table
    pieces = chunk_ranges(path, 20_000)
    assert len(pieces) > 1
    got = []
    for piece in pieces:
        source = RunLogSource(path, piece.to_dict())
        got += [(n, rec["call_id"]) for n, rec in source.records()]
    assert got == [(i, r["call_id"]) for i, r in enumerate(recs, start=1)]


def test_the_limits_a_source_is_given_reach_every_reader(run, monkeypatch):
    _, plain, packed, table = run
    for var in ("AUDIT_MAX_LINE_BYTES", "FCR_PARQUET_MAX_DECODED_BYTES"):
        monkeypatch.delenv(var, raising=False)
    tight = ReadLimits(max_line_bytes=100, max_decoded_bytes=1000)
    for path in (plain, packed):
        with pytest.raises(FcrLimitError, match="AUDIT_MAX_LINE_BYTES"):
            list(RunLogSource(path, limits=tight).records())
        assert len(list(RunLogSource(path).records())) > 0  # the environment's limits: fine
    with pytest.raises(FcrParseError, match="decoded limit of 1000"):
        RunLogSource(table, limits=tight).run_log()
    [(row, err)] = list(RunLogSource(table, limits=tight).rows())
    assert isinstance(err, FcrParseError) and "decoded limit of 1000" in err.reason
    [(row, err)] = list(RunLogSource(table, limits=tight).reader())
    assert "decoded limit of 1000" in err.reason
    # the same limit from the environment, where a deployment sets it
    monkeypatch.setenv("FCR_PARQUET_MAX_DECODED_BYTES", "1000")
    with pytest.raises(FcrParseError, match="decoded limit of 1000"):
        RunLogSource(table).run_log()


def test_a_gzip_file_is_one_piece_and_a_byte_range_of_it_is_refused(run):
    _, _, packed, _ = run
    [piece] = chunk_ranges(packed, 1000)
    assert piece.kind == "whole"
    with pytest.raises(ValueError, match="gzip file is read whole"):
        RunLogSource(packed, {"index": 0, "kind": "lines", "start": 0, "end": 10, "first_line": 1}).lines()
    with pytest.raises(ValueError, match="unknown chunk kind"):
        RunLogSource(packed, {"index": 0, "kind": "bytes", "start": 0, "end": 10, "first_line": 1})
