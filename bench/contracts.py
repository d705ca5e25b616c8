"""Benchmark: the whole contract suite for one implementation (the shipped conforming references) on CPU.

    .venv/bin/python bench/contracts.py [--json] [--seeds public|all]

Per contract: wall seconds of run_contract (one sandboxed child per contract, public + hidden seeds by
default) next to the in-process naive check (5 x allclose at one shape) measured in the same run, so the
ratio says what the harness costs over today's functional smoke test. The first row also pays for starting
the forkserver (one torch import); it is reported separately. Target: total <= 60 s on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seeds", choices=("public", "all"), default="all")
    args = ap.parse_args()

    import torch

    from workers.contracts import suite
    from workers.contracts.calibration import naive_check
    from workers.contracts.runner import run_contract
    from workers.contracts.sandbox import run_in_sandbox

    t0 = time.perf_counter()
    run_in_sandbox("workers.contracts.impls.reference:row_max", [], time_limit_s=120)  # start the forkserver
    startup = time.perf_counter() - t0

    rows = []
    t_all = time.perf_counter()
    for c in suite():
        ref = c.calibration["conforming"][0]
        ref = ref if isinstance(ref, str) else ref["impl"]
        seeds = list(c.protocol_params["seeds"]["public"]) if args.seeds == "public" else None
        t = time.perf_counter()
        v = run_contract(c, ref, seeds=seeds)
        dt = time.perf_counter() - t
        t = time.perf_counter()
        naive_check(c, ref)
        dn = time.perf_counter() - t
        rows.append({"class": c.cls, "verdict": v.verdict, "seconds": round(dt, 3), "naive_seconds": round(dn, 4),
                     "ratio": round(dt / dn, 1) if dn > 0 else None, "cases": v.harness.get("cases"),
                     "measurements": v.measurements, "margin": v.to_dict()["margin"]})
    total = time.perf_counter() - t_all
    out = {"total_seconds": round(total, 2), "forkserver_start_seconds": round(startup, 2), "rows": rows,
           "torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
           "seeds": args.seeds, "all_pass": all(r["verdict"] == "PASS" for r in rows)}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{'class':9s} {'verdict':8s} {'seconds':>8s} {'naive s':>8s} {'ratio':>7s} {'cases':>6s} {'meas':>5s} {'margin':>8s}")
        for r in rows:
            m = "-" if r["margin"] is None else f"{r['margin']:.3g}"
            print(f"{r['class']:9s} {r['verdict']:8s} {r['seconds']:8.2f} {r['naive_seconds']:8.3f} "
                  f"{r['ratio'] if r['ratio'] is not None else '-':>7} {r['cases']:>6} {r['measurements']:>5} {m:>8s}")
        print(f"total {total:.2f} s for {len(rows)} contracts (seeds: {args.seeds}); forkserver start {startup:.2f} s; "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    return 0 if out["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
