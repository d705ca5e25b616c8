"""Upload validation of an fcr-parquet/1 run log against the same log as JSONL, in one process, back to back
(issue 26, "Columnar intake": the Parquet file validates at least 10x faster than its JSONL).

    .venv/bin/python bench/validate_parquet.py                    # 2·10^5 response tokens, top-20 both sides
    .venv/bin/python bench/validate_parquet.py --tokens 1e6 --top-k 20

Prints validate_file on the JSONL, on the Parquet file by columns (workers/fcr/validate_columnar.py) and on the
Parquet file record by record (``by_columns=False``, the path before), best of ``--repeat``, and checks that the three
summaries agree (the Parquet ones exactly; the JSONL one but for ``format`` / byte counts).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workers.fcr.parquet_write import jsonl_to_parquet
from workers.fcr.synth import SynthConfig, iter_run
from workers.fcr.validate import validate_file


def best_of(fn, k):
    best, out = float("inf"), None
    for _ in range(k):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def write_jsonl(path, tokens: int, top_k: int) -> int:
    done = n = 0
    with open(path, "wb") as fh:
        traj = max(1, tokens // 200)
        for rec in iter_run(SynthConfig(trajectories=traj, seed=7, response_len=(100, 300), top_k=top_k)):
            fh.write(orjson.dumps(rec) + b"\n")
            done += len(rec["response"]["token_ids"])
            n += 1
    return done


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=float, default=2e5)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    tmp = args.dir or tempfile.mkdtemp(prefix="validate-parquet-")
    src, dst = os.path.join(tmp, "run.jsonl"), os.path.join(tmp, "run.parquet")
    toks = write_jsonl(src, int(args.tokens), args.top_k)
    conv = jsonl_to_parquet(src, dst)
    t_js, r_js = best_of(lambda: validate_file(src), args.repeat)
    t_col, r_col = best_of(lambda: validate_file(dst), args.repeat)
    t_rec, r_rec = best_of(lambda: validate_file(dst, by_columns=False), max(1, args.repeat - 1))
    skip = {"format", "bytes_read", "file_size"}
    same = r_col == r_rec and {k: v for k, v in r_col.items() if k not in skip} == {
        k: v for k, v in r_js.items() if k not in skip
    }
    print(
        f"run log: {r_js['records']} records, {toks} response tokens, top-{args.top_k} both sides; JSONL "
        f"{os.path.getsize(src) / 1e6:.1f} MB, Parquet {conv['bytes'] / 1e6:.1f} MB in {conv['row_groups']} row "
        f"groups"
    )
    print(f"validate_file JSONL                      {t_js:.3f} s")
    print(f"validate_file Parquet, record by record  {t_rec:.3f} s  -> {t_rec / t_js:.2f}x the JSONL time")
    print(
        f"validate_file Parquet, by columns        {t_col:.3f} s  -> {t_js / t_col:.1f}x faster than JSONL "
        f"(target >= 10x), {t_rec / t_col:.1f}x faster than record by record"
    )
    print(f"summaries equal: {same}")
    os.remove(src)
    os.remove(dst)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
