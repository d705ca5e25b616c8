"""Ingest benchmark: upload validation throughput against a plain orjson parse of the same file, and peak
memory while ingesting a large log through the upload path (hash + gzip probe + pre-flight + streaming
validation).

    .venv/bin/python bench/ingest.py                 # 256 MiB plain JSONL (about a minute)
    .venv/bin/python bench/ingest.py --size-mb 1024  # the 1 GB case of the issue
    .venv/bin/python bench/ingest.py --gzip          # the same, gzip-compressed
    .venv/bin/python bench/ingest.py --hostile       # bombs: each refused within its time and memory target

Prints: baseline seconds, validation seconds, the ratio (target ≤ 2×), and the peak RSS of a fresh process
that ingests the file (target < 300 MB).

``--hostile`` builds the inputs of issue #14 and runs each in a fresh process, printing wall time, peak RSS and the
refusal: a 4 MB gzip of zeros (4 GiB inflated) through Django's multipart parser with the portal's upload handler
and the pre-flight (targets: < 2 s, < 300 MB); then a 1 MB gzip holding two valid records and a 1 GiB line, and a
plain file with the same 1 GiB line (1 GiB on disk), through each engine — the validator, ``certify_file``,
``audit_file`` and the importers' reader (targets: < 60 s, < 600 MB each).
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
    out = subprocess.run(
        [sys.executable, "-c", INGEST_CHILD, str(path), str(ROOT)],
        capture_output=True,
        text=True,
        env={**os.environ, "AUDIT_VAR_DIR": tempfile.mkdtemp()},
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    before, peak, ok, valid, records = out.stdout.split()
    assert ok == "True" and valid == "True", out.stdout
    return int(before), int(peak)


# ------------------------------------------------------------------------------------------------ hostile inputs
WEB_CHILD = r"""
import io, os, resource, sys, time
sys.path.insert(0, sys.argv[2])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "audit_portal.settings")
import django; django.setup()
from django.http.multipartparser import MultiPartParser
from audit_portal.runs.upload_handler import HashingUploadHandler
from audit_portal.runs.preflight import preflight
data = open(sys.argv[1], "rb").read()
boundary = "benchboundary"
body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"bomb.jsonl.gz\"\r\n"
        f"Content-Type: application/gzip\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
del data
class Req: pass
request = Req()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
meta = {"CONTENT_TYPE": f"multipart/form-data; boundary={boundary}", "CONTENT_LENGTH": str(len(body))}
handler = HashingUploadHandler(request)
_, files = MultiPartParser(meta, io.BytesIO(body), [handler]).parse()
upload = files["file"]
check = preflight(upload)
upload.discard()
secs = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"{secs:.2f} {before // 1024} {peak // 1024} {check.code}: {check.message}")
"""

ENGINE_CHILD = r"""
import resource, sys, time
sys.path.insert(0, sys.argv[3])
engine, path = sys.argv[1], sys.argv[2]
start = time.perf_counter()
if engine == "validate_file":
    from workers.fcr.validate import validate_file
    out = validate_file(path)["errors"][-1]["reason"]
elif engine == "certify_file":
    from workers.certify.file import certify_file
    out = certify_file(path)["errors"][-1]["reason"]
elif engine == "audit_file":
    from workers.fidelity.audit import audit_file
    out = audit_file(path)["verdict_reasons"][0]
else:
    from workers.fidelity.importers.common import read_jsonl
    out = [r for r in read_jsonl(path)][-1][2]
secs = time.perf_counter() - start
print(f"{secs:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} {out}")
"""


def _child(code: str, *args) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "AUDIT_VAR_DIR": tempfile.mkdtemp()},
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return out.stdout.strip().split(" ", 3 if code is WEB_CHILD else 2)


def hostile(tmp: Path) -> None:
    import zlib

    import orjson

    from workers.fcr.synth import SynthConfig, iter_run

    bomb = tmp / "zeros.jsonl.gz"
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = comp.compress(b"\0" * (64 << 20)) + comp.flush()
    bomb.write_bytes(member * 64)  # 64 gzip members of 64 MiB of zeros: 4 GiB inflated
    secs, before, peak, refusal = _child(WEB_CHILD, bomb, ROOT)
    print(
        f"web: {bomb.stat().st_size / 1e6:.1f} MB gzip of zeros (4 GiB inflated): refused in {secs} s, peak RSS "
        f"{peak} MiB ({before} MiB before the request)   (targets < 2 s, < 300 MB)\n     {refusal}"
    )

    two = b"".join(orjson.dumps(r) + b"\n" for r in list(iter_run(SynthConfig(trajectories=2, seed=3)))[:2])
    gz_line = tmp / "line.jsonl.gz"
    with open(gz_line, "wb") as fh:
        comp = zlib.compressobj(9, zlib.DEFLATED, 31)
        fh.write(comp.compress(two + b'{"pad": "'))
        block = b"a" * (64 << 20)
        for _ in range(16):
            fh.write(comp.compress(block))
        fh.write(comp.compress(b'"}\n') + comp.flush())
    plain_line = tmp / "line.jsonl"
    with open(plain_line, "wb") as fh:
        fh.write(two + b'{"pad": "')
        for _ in range(16):
            fh.write(block)
        fh.write(b'"}\n')
    for path, what in (
        (gz_line, f"{gz_line.stat().st_size / 1e6:.1f} MB gzip, two records + a 1 GiB line"),
        (plain_line, f"plain {plain_line.stat().st_size / 2**30:.2f} GiB, two records + a 1 GiB line"),
    ):
        print(f"{what}:")
        for engine in ("validate_file", "certify_file", "audit_file", "importers"):
            secs, peak, refusal = _child(ENGINE_CHILD, engine, path, ROOT)
            print(
                f"  {engine:<14} refused in {secs:>6} s, peak RSS {peak:>4} MiB   (targets < 60 s, < 600 MB): {refusal}"
            )
    plain_line.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--keep", help="write the generated file here and keep it")
    parser.add_argument("--hostile", action="store_true", help="the bombs of issue #14 instead")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    if args.hostile:
        hostile(tmp)
        return
    path = Path(args.keep) if args.keep else tmp / ("run.jsonl.gz" if args.gzip else "run.jsonl")
    t0 = time.perf_counter()
    info = make_file(path, args.size_mb, args.gzip)
    print(
        f"generated {info['records']} records, {info['uncompressed_bytes'] / 2**20:.0f} MiB uncompressed, "
        f"{info['file_bytes'] / 2**20:.0f} MiB on disk in {time.perf_counter() - t0:.0f} s"
    )
    base = orjson_baseline(path)
    secs, summary = validation(path)
    assert summary["valid"], summary["errors"][:3]
    mib = info["uncompressed_bytes"] / 2**20
    print(f"orjson parse (baseline): {base:7.2f} s  {mib / base:7.1f} MiB/s")
    print(f"upload validation:       {secs:7.2f} s  {mib / secs:7.1f} MiB/s")
    print(f"ratio validation / orjson = {secs / base:.2f}x   (target <= 2x)")
    before, peak = ingest_peak_memory(path)
    print(
        f"peak RSS ingesting the file: {peak} MiB (interpreter + Django + imports before ingest: {before} MiB)"
        f"   (target < 300 MB)"
    )
    if not args.keep:
        path.unlink()


if __name__ == "__main__":
    main()
