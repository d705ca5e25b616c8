"""Chunks of a run log (workers/fcr/chunks.py): for any cut size, the pieces of a plain JSONL file read back exactly
the lines of a one-pass read with the same line numbers, each piece starts at a line start; Parquet pieces are whole
row groups and give the same rows; a gzip file is one piece; a range that does not start at a line is refused."""

from __future__ import annotations

import gzip

import orjson
import pytest
from hypothesis import given, settings, strategies as hs

from workers.fcr import columnar, parquet_write
from workers.fcr.chunks import Chunk, chunk_ranges, open_chunk, open_reader
from workers.fcr.reader import FcrParseError, LineReader, iter_records
from workers.fcr.synth import SynthConfig, iter_run


def _pieces(path, target):
    chunks = chunk_ranges(path, target)
    out = []
    for c in chunks:
        assert Chunk.from_dict(orjson.loads(orjson.dumps(c.to_dict()))) == c  # survives a JSON task message
        with open_chunk(path, c) as reader:
            out.append(list(reader))
    return chunks, out


def _line(b: bytes) -> bytes:  # no newline, and no gzip or Parquet magic at the start of the file
    return b.replace(b"\n", b"x").replace(b"\x1f", b"x").replace(b"P", b"p")


@given(
    lines=hs.lists(hs.binary(max_size=40).map(_line), max_size=30), trailing=hs.booleans(), target=hs.integers(1, 120)
)
@settings(max_examples=80, deadline=None)
def test_jsonl_pieces_are_the_one_pass_read(tmp_path_factory, lines, trailing, target):
    path = tmp_path_factory.mktemp("c") / "f.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"\n" if trailing and lines else b""))
    whole = list(LineReader(path))
    chunks, pieces = _pieces(path, target)
    assert [item for piece in pieces for item in piece] == whole
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert chunks[0].start == 0 and chunks[-1].end == path.stat().st_size
    data = path.read_bytes()
    for c, nxt in zip(chunks, chunks[1:]):
        assert c.end == nxt.start and data[nxt.start - 1 : nxt.start] == b"\n"  # contiguous, cut after a newline
        assert c.end > c.start  # never an empty piece
    for c, piece in zip(chunks, pieces):
        if piece:
            assert piece[0][0] == c.first_line


def test_jsonl_pieces_keep_their_size_and_read_records(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in iter_run(SynthConfig(trajectories=40, seed=5))))
    size = path.stat().st_size
    chunks = chunk_ranges(path, size // 4)
    assert 4 <= len(chunks) <= 5 and all(c.kind == "lines" for c in chunks)
    longest = max(len(line) for line in path.read_bytes().splitlines(keepends=True))
    assert all(c.end - c.start < size // 4 + longest for c in chunks)  # a piece overshoots by less than one line
    by_chunks = [rec for c in chunks for rec in iter_records(path, start=c.start, end=c.end, first_line=c.first_line)]
    assert by_chunks == list(iter_records(path))


def test_a_range_must_start_at_a_line(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n')
    with pytest.raises(ValueError, match="not the start of a line"):
        LineReader(path, start=3)
    assert list(LineReader(path, start=9, first_line=2)) == [(2, b'{"a": 2}\n')]


def test_gzip_is_one_piece_and_refuses_a_range(tmp_path):
    path = tmp_path / "f.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n' * 1000))
    chunks = chunk_ranges(path, 100)
    assert [c.kind for c in chunks] == ["whole"]
    assert len(list(open_chunk(path, chunks[0]))) == 1000
    with pytest.raises(ValueError, match="gzip"):
        LineReader(path, start=0, end=path.stat().st_size - 1)


def test_parquet_pieces_are_row_groups_with_whole_file_row_numbers(tmp_path):
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in iter_run(SynthConfig(trajectories=30, seed=3))))
    dst = tmp_path / "run.parquet"
    out = parquet_write.jsonl_to_parquet(src, dst, row_group_tokens=300)
    assert out["row_groups"] > 3
    whole = list(open_reader(dst))
    assert whole == list(columnar.iter_records(dst))
    for target in (1, dst.stat().st_size // 3, 1 << 40):
        chunks, pieces = _pieces(dst, target)
        assert all(c.kind == "row_groups" for c in chunks)
        assert [c.start for c in chunks[1:]] == [c.end for c in chunks[:-1]] and chunks[-1].end == out["row_groups"]
        assert [item for piece in pieces for item in piece] == whole
        assert all(piece[0][0] == c.first_line for c, piece in zip(chunks, pieces))
    assert len(chunk_ranges(dst, 1)) == out["row_groups"] and len(chunk_ranges(dst, 1 << 40)) == 1


def test_an_unreadable_parquet_is_one_piece_that_says_why(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    [chunk] = chunk_ranges(bad, 10)
    assert chunk.kind == "whole"
    [(row, err)] = list(open_chunk(bad, chunk))
    assert row == 0 and isinstance(err, FcrParseError)
