"""A run that grows: the cost of adding one segment to a run's live view against re-certifying the run so far.

    .venv/bin/python bench/live_merge.py                 # 32 segments of 2 steps, 8 x 64 tokens a step
    .venv/bin/python bench/live_merge.py --segments 64 --batch 16

For segment k the incremental path is what pipelines/live.py does: ``certify_part`` of segment k alone, the
stored partial read back from JSON (as from the database), ``merge``, ``summarise``, ``to_json``. The baseline,
measured in the same process, is what a portal without partials would do: ``certify_file`` over segments 1..k as one
file. Printed per k: both times and their ratio; the incremental cost should stay flat while the baseline grows with
k (the merge, summary and JSON round trip are O(#steps) bookkeeping, printed apart). The merged certificate is checked equal to the one-pass one at every k (summary, bounds, steps).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "client"), str(ROOT / "tests" / "portal")]

import pyarrow as pa  # noqa: E402 - after the repository folders are put on sys.path
import pyarrow.parquet as pq  # noqa: E402 - after the repository folders are put on sys.path

from audit_portal_client.fcr import RecordMeta, step_table  # noqa: E402 - after the repository folders are put on sys.path
from live_steps import step_batch  # noqa: E402  (the tests' generator: top-K on both sides, padded responses)
from workers.certify.file import certify_file, certify_part, plan_certificate, summarise  # noqa: E402 - after the repository folders are put on sys.path
from workers.certify.partial import Partial  # noqa: E402 - after the repository folders are put on sys.path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2, help="steps per segment")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64, help="response length")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-live-"))
    tables, merged, plan = [], None, None
    report_at = {1, 2, 4, 8, 16, 32, 64, 128, args.segments}
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; segments of {args.steps} steps x "
        f"{args.batch} sequences x {args.tokens} tokens"
    )
    print(
        f"{'k':>4} {'steps':>6} {'add segment k (s)':>18} {'of which merge+summary+JSON':>28} "
        f"{'re-certify 1..k (s)':>20} {'ratio':>7} {'partial JSON (kB)':>18}"
    )
    for k in range(1, args.segments + 1):
        steps = range((k - 1) * args.steps, k * args.steps)
        seg = [
            step_table(
                RecordMeta(run_id="bench"),
                s,
                call_prefix=f"b-{s}-",
                **step_batch(s, noise=0.01, B=args.batch, T=args.tokens),
            )
            for s in steps
        ]
        tables += seg
        path = tmp / f"seg-{k}.parquet"
        pq.write_table(pa.concat_tables(seg), path)
        plan = plan or plan_certificate(path)
        if k == 1:
            certify_part(path, plan)  # compile the interval kernel before anything is timed
        t0 = time.perf_counter()
        part = certify_part(path, plan)
        t_part = time.perf_counter() - t0
        total = part if merged is None else Partial.from_json(json.loads(merged)).merge(part)
        live = summarise(total, plan)
        merged = json.dumps(total.to_json())
        t_add = time.perf_counter() - t0
        if k not in report_at:
            continue
        whole = tmp / "whole.parquet"
        pq.write_table(pa.concat_tables(tables), whole)
        t0 = time.perf_counter()
        one = certify_file(whole)
        t_all = time.perf_counter() - t0
        for key in ("summary", "bounds", "steps"):
            assert live[key] == one[key], (k, key)
        print(
            f"{k:>4} {k * args.steps:>6} {t_add:>18.3f} {t_add - t_part:>28.3f} {t_all:>20.3f} "
            f"{t_all / t_add:>7.1f} {len(merged) / 1e3:>18.1f}"
        )
    print("merged live view == one-pass certificate at every reported k (summary, bounds, steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
