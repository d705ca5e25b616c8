"""Uploads that would exhaust the web process: a gzip bomb and an over-long line are refused by the pre-flight (the
streaming probe of audit_portal/runs/upload_handler.py, with the engines' limits from workers/fcr/reader.py) with
a JSON error naming the limit, nothing stored and no ``.part`` file left; the probe's memory stays bounded whatever
the ratio (tracemalloc)."""

from __future__ import annotations

import gzip
import os
import tracemalloc
import zlib

import orjson
import pytest

from audit_portal.runs.models import Upload
from audit_portal.runs.upload_handler import StreamProbe
from workers.fcr.reader import ReadLimits

from ..conftest import as_file, records, stored_files, upload_url

pytestmark = pytest.mark.django_db


def zeros_bomb(members=64, member_bytes=64 << 20) -> bytes:
    """About 4 MB of gzip inflating to 4 GiB of NUL bytes (concatenated members, each compressed once)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    one = comp.compress(b"\0" * member_bytes) + comp.flush()
    return one * members


def _refused(response, code, settings):
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code
    assert Upload.objects.count() == 0 and stored_files(settings) == []  # no upload, no .part file
    return error


def test_a_gzip_bomb_is_refused_as_such(api, project, settings):
    bomb = zeros_bomb()
    response = api.post(upload_url(project), {"file": as_file(bomb, "bomb.jsonl.gz")}, format="multipart")
    error = _refused(response, "inflation_limit", settings)
    assert "AUDIT_MAX_INFLATE_RATIO" in error["message"] and "decompression bomb" in error["message"]


def test_a_line_over_the_cap_is_refused_naming_the_line(api, project, settings, monkeypatch):
    monkeypatch.setenv("AUDIT_MAX_LINE_BYTES", str(1 << 20))
    pad = os.urandom(1 << 19).hex().encode() * 2  # 2 MiB in one line, compressing like real data
    plain = b"\n".join(orjson.dumps(r) for r in records(trajectories=2)[:2]) + b'\n{"pad": "' + pad + b'"}\n'
    data = gzip.compress(plain)
    response = api.post(upload_url(project), {"file": as_file(data, "long.jsonl.gz")}, format="multipart")
    error = _refused(response, "line_too_long", settings)
    assert "line 3" in error["message"] and "1 MiB (AUDIT_MAX_LINE_BYTES)" in error["message"]
    # the same in a plain (uncompressed) upload
    response = api.post(upload_url(project), {"file": as_file(plain, "long.jsonl")}, format="multipart")
    assert "line 3" in _refused(response, "line_too_long", settings)["message"]


def test_the_probe_inflates_a_bounded_amount_in_bounded_memory():
    bomb = zeros_bomb(members=16)
    probe = StreamProbe(compressed=True)
    tracemalloc.start()
    try:
        for i in range(0, len(bomb), 1 << 20):  # the upload handler's chunk size
            probe.feed(bomb[i : i + (1 << 20)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    limits = ReadLimits()
    assert probe.code == "inflation_limit"
    assert probe.inflated <= limits.ratio_floor_bytes + 2 * StreamProbe.STEP
    assert peak < 16 << 20


@pytest.mark.parametrize("cap", [10, 1000])
def test_the_probe_names_the_first_long_line_wherever_the_chunks_cut(cap):
    lines = [b"a" * 5, b"b" * cap, b"c" * (cap + 1), b"d"]
    data = b"\n".join(lines) + b"\n"
    for step in (1, 3, 7, len(data)):
        probe = StreamProbe(compressed=False, limits=ReadLimits(max_line_bytes=cap))
        for i in range(0, len(data), step):
            probe.feed(data[i : i + step])
        assert probe.code == "line_too_long" and probe.error.startswith("line 3:"), (step, probe.error)
    ok = StreamProbe(compressed=False, limits=ReadLimits(max_line_bytes=cap))
    ok.feed(b"\n".join(lines[:2]) + b"\n")
    ok.finish()
    assert ok.error is None and ok.lines == 2
