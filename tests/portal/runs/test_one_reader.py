"""One fcr/1 reader behind every entry point: a truncated or corrupt gzip upload is read to the same line by the
validator, ``certify_file``, the fidelity audit, the importers' reader and the portal's upload pre-flight — each
reports the complete lines before the break as read (K) and the break itself on line K + 1, with the same reason.

K is not taken from the reader under test: it is what zlib inflates of the damaged bytes fed one byte at a time."""

from __future__ import annotations

import gzip
import zlib

import orjson
import pytest

from tests.fcr.gzip_reference import inflatable_prefix
from workers.fcr.synth import SynthConfig, iter_run


@pytest.fixture(params=["truncated", "corrupt"])
def damaged(request, tmp_path):
    recs = list(iter_run(SynthConfig(trajectories=40, seed=2)))
    assert {r["role"] for r in recs} == {"policy", "background"}
    data = b"".join(orjson.dumps(r) + b"\n" for r in recs)
    if request.param == "truncated":
        blob = gzip.compress(data, 6)
        blob = blob[: len(blob) // 2]
    else:  # deflate decodes most garbage as data; a reserved block type (0b11) after a flush is refused at once
        c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        blob = c.compress(data[: len(data) * 3 // 5]) + c.flush(zlib.Z_FULL_FLUSH) + b"\x07" + data[:1000]
    path = tmp_path / "run.jsonl.gz"
    path.write_bytes(blob)
    complete = inflatable_prefix(blob).count(b"\n")
    assert 0 < complete < len(recs)
    return path, complete, request.param


def test_every_entry_point_stops_on_the_same_line(damaged):
    from audit_portal.runs.preflight import preflight
    from audit_portal.runs.upload_handler import hashed_file_from_path
    from workers.certify.file import certify_file
    from workers.fidelity.audit import audit_file
    from workers.fidelity.importers.common import read_jsonl
    from workers.fcr.validate import validate_file

    path, k, kind = damaged
    word = "truncated" if kind == "truncated" else "corrupt"

    v = validate_file(path)
    assert v["records"] == v["valid_records"] == k
    assert v["error_count"] == 1 and v["errors"][0]["line"] == k + 1 and word in v["errors"][0]["reason"]

    c = certify_file(path)["summary"]
    assert c["policy_records"] + sum(c["skipped"].values()) == k and c["records"] == k + 1  # + the break
    [err] = certify_file(path)["errors"]
    assert err["line"] == k + 1 and word in err["reason"]

    calls = audit_file(path)["coverage"]["calls"]
    assert calls["total"] == k + 1 and calls["unparsed_lines"] == 1

    rows = list(read_jsonl(path))
    assert [n for n, obj, _ in rows if obj is not None] == list(range(1, k + 1))
    assert rows[-1][0] == k + 1 and rows[-1][1] is None and word in rows[-1][2]

    upload = hashed_file_from_path(path)
    try:
        check = preflight(upload)
    finally:
        upload.close()
    assert not check.ok and check.code == "corrupt_compression"
    assert f"line {k + 1}: compressed stream is {word}" in check.message
