"""The one bounded line reader (workers/fcr/reader.py) and every engine that reads through it: lines come out exactly
as a plain split would give them (plain, gzip, multi-member, any chunking); a truncated stream yields every complete
line first; a line over the cap and a decompression bomb are refused naming the line and the limit, with memory
bounded by the cap (tracemalloc), not by the line or the inflated size; progress moves inside one long line; and the
validator, ``certify_file``, ``audit_file`` and the importers all refuse the same files the same way."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import os
import tracemalloc
import zlib

import orjson
import pytest
from hypothesis import assume, given, settings, strategies as hs

from tests.fcr.gzip_reference import inflatable_prefix
from workers.fcr.reader import FcrLimitError, FcrParseError, LineReader, ReadLimits, iter_lines, open_binary
from workers.fcr.synth import SynthConfig, iter_run

SMALL = ReadLimits(max_line_bytes=1000, max_inflate_ratio=50, max_inflated_bytes=1 << 30, ratio_floor_bytes=1 << 16)


def _write(path, data: bytes, gz: bool):
    path.write_bytes(gzip.compress(data, 6) if gz else data)
    return path


@given(
    lines=hs.lists(hs.binary(max_size=300).map(lambda b: b.replace(b"\n", b"x")), max_size=40),
    trailing=hs.booleans(),
    gz=hs.booleans(),
    members=hs.integers(1, 3),
)
@settings(max_examples=60, deadline=None)
def test_lines_are_exactly_a_split_of_the_stream(tmp_path_factory, lines, trailing, gz, members):
    data = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    # A plain file that starts with gzip's magic bytes is read as gzip, by design (run logs are detected by content);
    # such a file is not a split of plain text, so it is not an example of this property.
    assume(gz or not data.startswith(b"\x1f\x8b"))
    path = tmp_path_factory.mktemp("r") / "f"
    if gz and members > 1 and data:  # a multi-member gzip file: concatenated members read as one stream
        cut = [len(data) * i // members for i in range(members + 1)]
        path.write_bytes(b"".join(gzip.compress(data[a:b]) for a, b in zip(cut, cut[1:])))
    else:
        _write(path, data, gz)
    got = list(LineReader(path, limits=SMALL))
    *whole, last = data.split(b"\n")
    want = [line + b"\n" for line in whole] + ([last] if last else [])
    assert [line for _, line in got] == want
    assert [n for n, _ in got] == list(range(1, len(want) + 1))


def test_truncated_gzip_yields_every_complete_line_then_names_the_next(tmp_path):
    data = b"".join(b'{"n": %d}\n' % i for i in range(20000))
    blob = gzip.compress(data)
    path = tmp_path / "t.gz"
    path.write_bytes(blob[: len(blob) // 2])
    seen = []
    with pytest.raises(FcrParseError) as err:
        for n, line in LineReader(path):
            seen.append(line)
    assert seen and all(line.endswith(b"\n") for line in seen)
    assert b"".join(seen) == data[: len(b"".join(seen))]
    assert err.value.line == len(seen) + 1 and "truncated" in err.value.reason
    assert not isinstance(err.value, FcrLimitError)


def test_corrupt_gzip_and_trailing_garbage_are_parse_errors(tmp_path):
    blob = bytearray(gzip.compress(b"a\nb\n" * 1000))
    blob[40] ^= 0xFF
    with pytest.raises(FcrParseError, match="corrupt"):
        list(LineReader(_raw(tmp_path / "c.gz", bytes(blob))))
    with pytest.raises(FcrParseError, match="corrupt"):
        list(LineReader(_raw(tmp_path / "g.gz", gzip.compress(b"a\n") + b"garbage")))


def _raw(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("where", [0.3, 0.9])
def test_corrupt_gzip_yields_every_complete_line_before_the_bad_byte(tmp_path, where):
    # zlib's decompress raises without returning what it inflated in the same call (a whole 256 KiB read step,
    # thousands of lines here): the reader must still yield them, then name the next line. Deflate decodes most
    # garbage as data, so the damage is a reserved block type (0b11) after a flush, which zlib refuses at that byte.
    data = b"".join(
        b'{"n": %d, "pad": "%s"}\n' % (i, hashlib.sha256(b"%d" % i).hexdigest()[:32].encode()) for i in range(60000)
    )
    c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    blob = c.compress(data[: int(len(data) * where)]) + c.flush(zlib.Z_FULL_FLUSH) + b"\x07" + data[:5000]
    prefix = inflatable_prefix(blob)
    assert prefix == data[: int(len(data) * where)] and 0 < prefix.count(b"\n") < data.count(b"\n")
    seen = []
    with pytest.raises(FcrParseError, match="corrupt") as err:
        for n, line in LineReader(_raw(tmp_path / "c.gz", blob)):
            seen.append(line)
    assert len(seen) == prefix.count(b"\n") and b"".join(seen) == prefix[: prefix.rfind(b"\n") + 1]
    assert err.value.line == len(seen) + 1


@pytest.mark.parametrize("gz", [False, True])
def test_a_line_over_the_cap_is_refused_naming_line_and_limit(tmp_path, gz):
    ok = b"x" * 1000 + b"\n"  # exactly the cap (the newline is not counted)
    path = _write(tmp_path / "l", b"a\n" + ok + b"y" * 1001 + b"\nb\n", gz)
    got = []
    with pytest.raises(FcrLimitError) as err:
        for n, line in LineReader(path, limits=SMALL):
            got.append(n)
    assert got == [1, 2] and err.value.line == 3 and err.value.code == "line_too_long"
    assert "longer than 1000 bytes (AUDIT_MAX_LINE_BYTES)" in str(err.value)
    # the same cap from the environment
    assert list(
        LineReader(_write(tmp_path / "e", ok, gz), limits=ReadLimits.from_env({"AUDIT_MAX_LINE_BYTES": "1000"}))
    )
    with pytest.raises(ValueError, match="AUDIT_MAX_LINE_BYTES"):
        ReadLimits.from_env({"AUDIT_MAX_LINE_BYTES": "-3"})


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_line_costs_memory_of_the_cap_not_of_the_line(tmp_path):
    # 256 MiB in one plain line with a 1 MiB cap: refused after reading about 1 MiB of it
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as fh:
        fh.write(b'{"a": 1}\n')
        fh.truncate(256 << 20)  # a sparse file: 256 MiB of NUL bytes after the first line, no newline
    limits = ReadLimits(max_line_bytes=1 << 20)

    def read():
        with pytest.raises(FcrLimitError) as err:
            list(LineReader(path, limits=limits))
        assert err.value.line == 2

    assert _peak(read) < 8 << 20


def test_a_gzip_bomb_is_refused_after_inflating_a_bounded_amount(tmp_path):
    # 256 MiB of newlines (every line blank, so no line cap helps) in about 256 KB of gzip
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\n" * (1 << 24)
    blob = b"".join(comp.compress(block) for _ in range(16)) + comp.flush()
    path = _raw(tmp_path / "bomb.gz", blob)
    reader = LineReader(path)

    def read():
        with pytest.raises(FcrLimitError) as err:
            for _ in reader:
                pass
        assert err.value.code == "inflation_limit" and "AUDIT_MAX_INFLATE_RATIO" in err.value.reason

    assert _peak(read) < 16 << 20
    d = ReadLimits()
    assert reader.inflated <= max(d.max_inflate_ratio * reader.position, d.ratio_floor_bytes) + (1 << 20) < 1 << 30
    with pytest.raises(FcrLimitError):  # the whole-stream reader has the same limit
        with open_binary(path) as fh:
            while fh.read(1 << 20):
                pass
    with pytest.raises(FcrLimitError, match="AUDIT_MAX_INFLATED_BYTES"):
        list(LineReader(path, limits=ReadLimits(max_inflated_bytes=4 << 20, max_inflate_ratio=10**6)))


def test_progress_moves_inside_one_long_line(tmp_path):
    path = _raw(tmp_path / "long.gz", gzip.compress(os.urandom(20 << 20).hex().encode(), 1))  # 40 MiB, one line
    seen = []
    with pytest.raises(FcrLimitError):
        for _ in LineReader(path, limits=ReadLimits(max_line_bytes=32 << 20), on_bytes=seen.append):
            pass
    assert len(seen) >= 2 and seen == sorted(seen) and seen[-1] > seen[0]  # while still on line 1


# ---------------------------------------------------------------------------------------------------- engines
def _records(n=2):
    return list(itertools.islice(iter_run(SynthConfig(trajectories=3, seed=1)), n))


@pytest.fixture
def long_line_log(tmp_path, monkeypatch):
    """Two valid records, then a line over the cap (1 MB here, set through the environment), then a valid one."""
    monkeypatch.setenv("AUDIT_MAX_LINE_BYTES", str(1 << 20))
    recs = _records()
    path = tmp_path / "long.jsonl.gz"
    body = b"".join(orjson.dumps(r) + b"\n" for r in recs)
    pad = os.urandom(1 << 19).hex().encode() * 2  # 2 MiB that compresses about 2:1, like real data (no bomb)
    path.write_bytes(gzip.compress(body + b'{"pad": "' + pad + b'"}\n' + orjson.dumps(recs[0]) + b"\n"))
    return path


@pytest.fixture
def bomb(tmp_path):
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(gzip.compress(orjson.dumps(_records(1)[0]) + b"\n" + b"\n" * (64 << 20), 9))
    return path


LIMIT_LINE = "longer than 1 MiB (AUDIT_MAX_LINE_BYTES)"


def test_validator_refuses_both(long_line_log, bomb):
    from workers.fcr.validate import validate_file

    out = validate_file(long_line_log)
    assert not out["valid"] and out["valid_records"] == 2
    assert out["errors"][-1]["line"] == 3 and LIMIT_LINE in out["errors"][-1]["reason"]
    out = validate_file(bomb)
    assert not out["valid"] and "AUDIT_MAX_INFLATE_RATIO" in out["errors"][-1]["reason"]


def test_certify_file_refuses_both(long_line_log, bomb):
    from workers.certify.file import certify_file

    out = certify_file(long_line_log)
    assert any(e["line"] == 3 and LIMIT_LINE in e["reason"] for e in out["errors"]), out["errors"]
    out = certify_file(bomb)
    assert any("AUDIT_MAX_INFLATE_RATIO" in e["reason"] for e in out["errors"]), out["errors"]


def test_audit_file_refuses_both(long_line_log, bomb):
    from workers.fidelity.audit import audit_file

    for path in (long_line_log, bomb):
        out = audit_file(path)
        assert out["verdict"] == "FAIL" and out["coverage"]["calls"]["unparsed_lines"] == 1


def test_importers_refuse_both(long_line_log, bomb):
    from workers.fidelity.importers.common import read_jsonl

    rows = list(read_jsonl(long_line_log))
    assert [r[0] for r in rows] == [1, 2, 3] and rows[-1][1] is None and LIMIT_LINE in rows[-1][2]
    assert "AUDIT_MAX_INFLATE_RATIO" in list(read_jsonl(bomb))[-1][2]
    with pytest.raises(FcrLimitError):
        list(iter_lines(bomb))


def test_a_plain_file_starting_with_the_gzip_magic_is_read_as_gzip_and_refused_by_line(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"\x1f\x8bnot gzip\nsecond line\n")
    with pytest.raises(FcrParseError, match="line 1: compressed stream is corrupt"):
        list(LineReader(path, limits=SMALL))
