"""Bounded Parquet decoding (workers/fcr/columnar.py, ``RunLog``): a small file whose dictionary-encoded column
decodes to far more than its footer declares — one long string in every row — is refused by the validation
reader and by the upload pre-flight with a message naming the column and the limit, before it is decoded; the
process that reads it stays small. Memory is measured, not inferred: each read runs in a fresh interpreter under an
address-space limit, and reports its peak resident set size (``VmHWM``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workers.fcr import columnar, parquet_write
from workers.fcr.reader import ReadLimits
from workers.fcr.synth import SynthConfig, iter_run

ROOT = Path(__file__).resolve().parents[2]
ROWS = 4096
PAD = 200 * 1024  # 4096 rows x 200 KiB: 820 MB once decoded


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("bomb")
    recs = list(iter_run(SynthConfig(trajectories=4, seed=3)))
    src = tmp / "small.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    parquet_write.jsonl_to_parquet(src, tmp / "small.parquet")
    t = pq.read_table(tmp / "small.parquet")
    t = pa.concat_tables([t] * (ROWS // t.num_rows + 1)).slice(0, ROWS)
    meta = orjson.loads(t.column(columnar.META)[0].as_py())
    meta["note"] = "x" * PAD
    # the same record text in every row, built as a dictionary array (one value, ROWS indices) so that making the
    # bomb never holds it decoded either; the file's schema says string, as any writer's would
    bomb = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(ROWS, dtype=np.int32)), pa.array([orjson.dumps(meta).decode()])
    )
    col = t.schema.get_field_index(columnar.META)
    bombed = t.set_column(col, pa.field(columnar.META, bomb.type, nullable=False), bomb)
    path = tmp / "bomb.parquet"
    with pq.ParquetWriter(path, bombed.schema, use_dictionary=True, compression="zstd", store_schema=False) as w:
        w.write_table(bombed, row_group_size=ROWS)
        w.add_key_value_metadata(
            {k.decode(): v.decode() for k, v in t.schema.metadata.items() if not k.startswith(b"ARROW:")}
        )
    assert pq.ParquetFile(path).schema_arrow.field(columnar.META).type == pa.string()
    md = pq.ParquetFile(path).metadata
    assert path.stat().st_size < 4 << 20 and md.num_row_groups == 1
    assert md.row_group(0).total_byte_size < ReadLimits().max_row_group_bytes  # the footer alone lets it through
    return path


READER = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a runaway read fails here instead of on the machine
from workers.fcr import columnar
from workers.fcr.validate import validate_file
what, path = sys.argv[1], sys.argv[2]
if what == "preflight":
    errors, checked = columnar.head_issues(path)
    out = {"errors": errors, "checked": checked}
else:
    report = validate_file(path)
    out = {"errors": report["errors"][:3], "valid": report["valid"]}
# the peak of this process since exec (VmHWM; ru_maxrss would include the forking parent's pages)
out["maxrss_mb"] = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
print(json.dumps(out))
"""


def read_in_child(what: str, path: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", READER, what, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_bomb_decodes_to_far_more_than_the_limit(bomb):
    """The premise: what the row group would decode to, measured on the dictionary arrays without decoding."""
    log = columnar.RunLog(bomb)
    try:
        arr = next(
            pq.ParquetFile(bomb, read_dictionary=[columnar.META]).iter_batches(batch_size=ROWS, columns=[columnar.META])
        ).column(0)
        assert columnar._decoded_bytes(arr) > ROWS * PAD > 3 * ReadLimits().max_decoded_bytes
    finally:
        log.close()


@pytest.mark.parametrize("what", ["validate", "preflight"])
def test_a_dictionary_bomb_is_refused_before_decoding_with_bounded_memory(bomb, what):
    out = read_in_child(what, bomb)
    reason = out["errors"][0]["reason"]
    assert "meta_json" in reason and "decoded limit" in reason and "refused before decoding" in reason, out
    if what == "validate":
        assert out["valid"] is False
    # 820 MB if decoded; the reader's own baseline (Python, numpy, pyarrow) is about 100 MB
    assert out["maxrss_mb"] < 400, out


def test_an_ordinary_file_reads_the_same_and_its_preflight_sample_is_small(tmp_path):
    recs = list(iter_run(SynthConfig(trajectories=6, seed=1)))
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    dst = tmp_path / "run.parquet"
    parquet_write.jsonl_to_parquet(src, dst, row_group_tokens=300)
    got = [rec for _, rec in columnar.iter_records(dst)]
    assert len(got) == len(recs) and got[0]["call_id"] == recs[0]["call_id"]
    errors, checked = columnar.head_issues(dst, max_records=5)
    assert errors == [] and checked == 5


def test_declared_numbers_above_the_decoded_limit_are_refused_from_the_footer(tmp_path, monkeypatch):
    recs = list(iter_run(SynthConfig(trajectories=3, seed=2)))
    src = tmp_path / "run.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    dst = tmp_path / "run.parquet"
    parquet_write.jsonl_to_parquet(src, dst)
    monkeypatch.setenv("FCR_PARQUET_MAX_DECODED_BYTES", "1000")
    with pytest.raises(columnar.FcrParseError, match="bytes of numbers, above the decoded limit of 1000"):
        columnar.RunLog(dst)
    monkeypatch.undo()
    errors, checked = columnar.head_issues(dst)  # default limits: fine
    assert errors == [] and checked > 0
    log = columnar.RunLog(dst)
    try:
        assert log.head(5, limit=100) is None  # a group larger than the sample limit is left to the job, not refused
        assert log.head(5).num_rows == 5
    finally:
        log.close()
