"""Fidelity audit throughput vs a plain orjson parse of the same generated fcr/1 file, and peak memory.

    python bench/fidelity.py                 # ~20 MB file
    python bench/fidelity.py --mb 200        # bigger
    python bench/fidelity.py --gb            # 1 GB (check disk space: the file is written to --dir or /tmp)
    python bench/fidelity.py --json          # machine-readable

Each measurement runs in a fresh subprocess, so that its peak RSS (``ru_maxrss``) is its own, and is repeated
``--repeat`` times (the range is printed; ratios use the fastest run of each phase). Phases, all on the same file:

* ``parse``        the baseline: ``orjson.loads`` of every line, Python's default garbage collector on
* ``parse-nogc``   the same loop with the collector disabled — the stricter baseline, because the audit pauses the
                   collector while it runs (``workers.fidelity.audit``); both ratios are reported
* ``validate``     ``workers.fcr.validate_file``
* ``audit``        ``audit_file`` without certificates
* ``audit+cert``   ``audit_file`` with the certificates of docs/fidelity-rules.md#certificate-checks (through
                   ``workers.certify``; torch is imported before the clock starts)

Times are CPU seconds of the measured process (user + system, all threads) — on a shared machine wall-clock time
mostly measures the neighbours; wall seconds are reported too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PHASES = ("parse", "parse-nogc", "validate", "audit", "audit+cert")
PHASE = r"""
import gc, json, os, resource, sys, time
sys.path.insert(0, {root!r})
import orjson
path, phase = {path!r}, {phase!r}
from workers.fcr import validate_file
from workers.fidelity import audit_file
if phase == "audit+cert":
    import workers.certify.intervals  # import cost (torch) is not audit time
cpu = time.process_time  # user + system, every thread of this process
if phase == "parse-nogc":
    gc.disable()
t, c = time.perf_counter(), cpu()
if phase.startswith("parse"):
    with open(path, "rb") as fh:
        for line in fh:
            orjson.loads(line)
elif phase == "validate":
    assert validate_file(path)["valid"]
else:
    rep = audit_file(path, certificates=(phase == "audit+cert"), call_sink=lambda entries: None)
    assert rep["coverage"]["calls"]["total"] > 0
print(json.dumps({{"cpu_seconds": cpu() - c, "wall_seconds": time.perf_counter() - t,
                   "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def measure(path, phase):
    out = subprocess.run(
        [sys.executable, "-c", PHASE.format(root=ROOT, path=path, phase=phase)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def generate(path, target_bytes, *, resp_len, prompt_len, k):
    from workers.fidelity.synth import write_synth

    # estimate bytes per record from a small sample, then write the whole file once
    probe = path + ".probe"
    per = write_synth(probe, 20, resp_len=resp_len, prompt_len=prompt_len, k=k) / 20
    os.remove(probe)
    n = max(1, int(target_bytes / per))
    size = write_synth(path, n, resp_len=resp_len, prompt_len=prompt_len, k=k)
    return n, size


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--gb", action="store_true", help="1 GB file")
    ap.add_argument("--resp-len", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2, help="runs per phase (interleaved); the fastest is compared")
    ap.add_argument("--phases", default=",".join(PHASES), help="comma-separated subset of " + ",".join(PHASES))
    ap.add_argument("--file", default=None, help="an existing fcr/1 file instead of a generated one")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    phases = [p for p in args.phases.split(",") if p]
    for p in phases:
        if p not in PHASES:
            ap.error(f"unknown phase {p!r}")
    target = (1 << 30) if args.gb else int(args.mb * (1 << 20))
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        if args.file:
            path, n, size, gen_s = args.file, None, os.path.getsize(args.file), 0.0
        else:
            path = os.path.join(d, "bench.jsonl")
            t = time.perf_counter()
            n, size = generate(path, target, resp_len=args.resp_len, prompt_len=args.prompt_len, k=args.top_k)
            gen_s = time.perf_counter() - t
        runs = {p: [] for p in phases}
        for _ in range(args.repeat):  # interleaved, so that a busy spell on a shared machine hits every phase
            for p in phases:
                runs[p].append(measure(path, p))
    res = {"file_bytes": size, "records": n, "generate_seconds": gen_s, "repeat": args.repeat, "phases": {}}
    for p, rs in runs.items():
        best = min(rs, key=lambda r: r["cpu_seconds"])
        res["phases"][p] = {
            "cpu_seconds": best["cpu_seconds"],
            "wall_seconds": best["wall_seconds"],
            "cpu_seconds_range": [min(r["cpu_seconds"] for r in rs), max(r["cpu_seconds"] for r in rs)],
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "mb_per_s_cpu": size / best["cpu_seconds"] / 1e6,
        }
    for base in ("parse", "parse-nogc"):
        if base in res["phases"]:
            b = res["phases"][base]["cpu_seconds"]
            for p, r in res["phases"].items():
                if not p.startswith("parse"):
                    r[f"ratio_to_{base}"] = r["cpu_seconds"] / b
                    lo, hi = r["cpu_seconds_range"]
                    r[f"ratio_to_{base}_range"] = [lo / b, hi / b]
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"file: {size / 1e6:.1f} MB, {n} records; CPU seconds, best of {args.repeat} (range)")
        for p, r in res["phases"].items():
            lo, hi = r["cpu_seconds_range"]
            ratios = "".join(f"  {r[k]:.2f}x {k[9:]}" for k in ("ratio_to_parse", "ratio_to_parse-nogc") if k in r)
            print(
                f"  {p:11s} {r['cpu_seconds']:7.2f} s ({lo:.2f}–{hi:.2f}) {r['mb_per_s_cpu']:7.1f} MB/s  "
                f"wall {r['wall_seconds']:7.2f} s  peak RSS {r['peak_rss_mb']:5.0f} MB{ratios}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
