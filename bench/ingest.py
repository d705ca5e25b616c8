"""Ingest benchmark: upload validation throughput against a plain orjson parse of the same file, and peak
memory while ingesting a large log through the upload path (hash + gzip probe + pre-flight + streaming
validation).

    .venv/bin/python bench/ingest.py                 # 256 MiB plain JSONL (about a minute)
    .venv/bin/python bench/ingest.py --size-mb 1024  # the 1 GB case of the issue
    .venv/bin/python bench/ingest.py --gzip          # the same, gzip-compressed

Prints: baseline seconds, validation seconds, the ratio (target ≤ 2×), and the peak RSS of a fresh process
that ingests the file (target < 300 MB).
"""
from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_file(path: Path, size_mb: int, compress: bool) -> dict:
    """A realistic run log of about ``size_mb`` MiB (uncompressed): a generated base block repeated with
    fresh call ids, so generation does not dominate the benchmark."""
    import orjson

    from workers.fcr.synth import SynthConfig, iter_run

    base = [orjson.dumps(r) for r in iter_run(SynthConfig(trajectories=200, seed=3))]
    target = size_mb * 1024 * 1024
    written = records = 0
    opener = (lambda: gzip.open(path, "wb", compresslevel=1)) if compress else (lambda: open(path, "wb"))
    with opener() as fh:
        rep = 0
        while written < target:
            for line in base:
                rec = orjson.loads(line)
                rec["call_id"] = f"{rec['call_id']}-r{rep}"
                rec["trajectory_id"] = f"{rec['trajectory_id']}-r{rep}"
                out = orjson.dumps(rec) + b"\n"
                fh.write(out)
                written += len(out)
                records += 1
                if written >= target:
                    break
            rep += 1
    return {"records": records, "uncompressed_bytes": written, "file_bytes": path.stat().st_size}


def orjson_baseline(path: Path) -> float:
    import orjson

    from workers.fcr.reader import open_binary

    start = time.perf_counter()
    with open_binary(path) as fh:
        for line in fh:
            orjson.loads(line)
    return time.perf_counter() - start


def validation(path: Path) -> tuple[float, dict]:
    from workers.fcr.validate import validate_file

    start = time.perf_counter()
    summary = validate_file(path)
    return time.perf_counter() - start, summary


INGEST_CHILD = r"""
import os, resource, sys
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "audit_portal.settings")
import django; django.setup()
from pathlib import Path
from audit_portal.runs.upload_handler import hashed_file_from_path
from audit_portal.runs.preflight import preflight
from workers.fcr.validate import validate_file
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
f = hashed_file_from_path(Path(sys.argv[1]))
ok = preflight(f).ok
f.close()
summary = validate_file(sys.argv[1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(before // 1024, peak // 1024, ok, summary["valid"], summary["records"])
"""


def ingest_peak_memory(path: Path) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", INGEST_CHILD, str(path), str(ROOT)], capture_output=True, text=True,
                         env={**os.environ, "AUDIT_VAR_DIR": tempfile.mkdtemp()})
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    before, peak, ok, valid, records = out.stdout.split()
    assert ok == "True" and valid == "True", out.stdout
    return int(before), int(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--keep", help="write the generated file here and keep it")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    path = Path(args.keep) if args.keep else tmp / ("run.jsonl.gz" if args.gzip else "run.jsonl")
    t0 = time.perf_counter()
    info = make_file(path, args.size_mb, args.gzip)
    print(f"generated {info['records']} records, {info['uncompressed_bytes'] / 2**20:.0f} MiB uncompressed, "
          f"{info['file_bytes'] / 2**20:.0f} MiB on disk in {time.perf_counter() - t0:.0f} s")
    base = orjson_baseline(path)
    secs, summary = validation(path)
    assert summary["valid"], summary["errors"][:3]
    mib = info["uncompressed_bytes"] / 2**20
    print(f"orjson parse (baseline): {base:7.2f} s  {mib / base:7.1f} MiB/s")
    print(f"upload validation:       {secs:7.2f} s  {mib / secs:7.1f} MiB/s")
    print(f"ratio validation / orjson = {secs / base:.2f}x   (target <= 2x)")
    before, peak = ingest_peak_memory(path)
    print(f"peak RSS ingesting the file: {peak} MiB (interpreter + Django + imports before ingest: {before} MiB)"
          f"   (target < 300 MB)")
    if not args.keep:
        path.unlink()


if __name__ == "__main__":
    main()
