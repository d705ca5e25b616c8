"""Byte-level mutation fuzzing of the fcr/1 reader and validator: a valid run log (plain or gzip) with bytes
flipped, inserted, deleted or the stream cut short still gives a report from ``validate_file``, and
``iter_records`` yields records or raises FcrParseError naming a line — nothing else. (test_validate_fuzz.py feeds
random bytes and random JSON values; mutated valid files reach deeper: real gzip headers, real JSON structure.)"""

from __future__ import annotations

import gzip

import orjson
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from workers.fcr import validate_file
from workers.fcr.reader import FcrParseError, iter_records

from .conftest import EXAMPLE_A

VALID = b"\n".join(orjson.dumps({**EXAMPLE_A, "call_id": f"tA-{i}", "call_index": i}) for i in range(3)) + b"\n"
FUZZ = hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

edits = st.lists(
    st.tuples(st.sampled_from(["flip", "insert", "delete"]), st.floats(0, 1, exclude_max=True), st.integers(0, 255)),
    min_size=1,
    max_size=6,
)


def mutate(data: bytes, ops) -> bytes:
    out = bytearray(data)
    for op, where, byte in ops:
        if not out:
            break
        i = int(where * len(out))
        if op == "flip":
            out[i] ^= byte or 1
        elif op == "insert":
            out.insert(i, byte)
        else:
            del out[i]
    return bytes(out)


@FUZZ
@given(edits, st.booleans(), st.floats(0.05, 1))
def test_a_mutated_valid_file_never_crashes_the_reader_or_validator(tmp_path_factory, ops, compress, keep):
    data = gzip.compress(VALID) if compress else VALID
    data = mutate(data, ops)[: max(1, int(len(data) * keep))]
    path = tmp_path_factory.mktemp("mut") / "run.jsonl"
    path.write_bytes(data)
    report = validate_file(path)
    assert isinstance(report["valid"], bool) and report["error_count"] >= len(report["errors"])
    orjson.dumps(report)
    records, parse_error = 0, None
    try:
        for line, record in iter_records(path):
            assert isinstance(record, dict) and line >= 1
            records += 1
    except FcrParseError as exc:
        assert exc.line >= 1 and exc.reason
        parse_error = exc
    if report["valid"]:  # what the validator accepts, the reader the jobs use reads whole
        assert parse_error is None and records == report["records"]


def test_the_unmutated_file_is_valid(tmp_path):
    for data in (VALID, gzip.compress(VALID)):
        path = tmp_path / "run.jsonl"
        path.write_bytes(data)
        assert validate_file(path)["valid"]
