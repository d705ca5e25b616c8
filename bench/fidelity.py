"""Fidelity audit throughput vs a plain orjson parse of the same generated fcr/1 file, and peak memory.

    python bench/fidelity.py                 # ~20 MB file, a couple of minutes on a laptop
    python bench/fidelity.py --mb 200        # bigger
    python bench/fidelity.py --gb            # 1 GB (slow; check disk space)
    python bench/fidelity.py --json          # machine-readable

Each measurement runs in a fresh subprocess so that its peak RSS (``ru_maxrss``) is its own. Phases: ``parse``
(orjson.loads of every line, the baseline), ``validate`` (workers.fcr.validate_file), ``audit`` (audit_file without
certificates), ``audit+cert`` (with §6.3 certificates via workers.certify; sampled on at most ``--cert-mb`` MB because
the torch interval path is the slowest part) — each reported as seconds, MB/s and ratio to ``parse``.
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

PHASE = r'''
import json, resource, sys, time
sys.path.insert(0, {root!r})
import orjson
path, phase = {path!r}, {phase!r}
from workers.fcr import validate_file
from workers.fidelity import audit_file
if phase == "audit+cert":
    import workers.certify.intervals  # import cost (torch) is not audit time
t = time.perf_counter()
if phase == "parse":
    with open(path, "rb") as fh:
        for line in fh:
            orjson.loads(line)
elif phase == "validate":
    assert validate_file(path)["valid"]
else:
    rep = audit_file(path, certificates=(phase == "audit+cert"), max_calls_in_report=0)
    assert rep["coverage"]["calls"]["total"] > 0
dt = time.perf_counter() - t
print(json.dumps({{"seconds": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
'''


def measure(path, phase):
    out = subprocess.run([sys.executable, "-c", PHASE.format(root=ROOT, path=path, phase=phase)],
                         capture_output=True, text=True, check=True)
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
    ap.add_argument("--cert-mb", type=float, default=5.0, help="size of the sample the certificate phase runs on")
    ap.add_argument("--resp-len", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2, help="take the best of N runs per phase")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    target = (1 << 30) if args.gb else int(args.mb * (1 << 20))
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = os.path.join(d, "bench.jsonl")
        t = time.perf_counter()
        n, size = generate(path, target, resp_len=args.resp_len, prompt_len=args.prompt_len, k=args.top_k)
        gen_s = time.perf_counter() - t
        cert_path = os.path.join(d, "cert.jsonl")
        cn, csize = generate(cert_path, min(target, int(args.cert_mb * (1 << 20))), resp_len=args.resp_len,
                             prompt_len=args.prompt_len, k=args.top_k)
        res = {"file_bytes": size, "records": n, "tokens": n * args.resp_len, "generate_seconds": gen_s,
               "phases": {}}
        for phase, p, sz in (("parse", path, size), ("validate", path, size), ("audit", path, size),
                             ("parse(cert sample)", cert_path, csize), ("audit+cert", cert_path, csize)):
            runs = [measure(p, "parse" if phase.startswith("parse") else phase) for _ in range(args.repeat)]
            best = min(runs, key=lambda r: r["seconds"])
            best["mb_per_s"] = sz / best["seconds"] / 1e6
            res["phases"][phase] = best
        base = res["phases"]["parse"]["seconds"]
        for ph in ("validate", "audit"):
            res["phases"][ph]["ratio_to_parse"] = res["phases"][ph]["seconds"] / base
        cb = res["phases"]["parse(cert sample)"]["seconds"]
        res["phases"]["audit+cert"]["ratio_to_parse"] = res["phases"]["audit+cert"]["seconds"] / cb
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"file: {size / 1e6:.1f} MB, {n} records, {n * args.resp_len} response tokens")
        for ph, r in res["phases"].items():
            ratio = f"  {r['ratio_to_parse']:.2f}x parse" if "ratio_to_parse" in r else ""
            print(f"  {ph:20s} {r['seconds']:8.2f} s  {r['mb_per_s']:7.1f} MB/s  peak RSS {r['peak_rss_mb']:7.0f} MB{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
