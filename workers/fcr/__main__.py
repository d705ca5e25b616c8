"""``python -m workers.fcr convert IN OUT``: fcr/1 JSONL (plain or gzip) ⇄ ``fcr-parquet/1``.
``python -m workers.fcr synth OUT``: a realistic synthetic run log (workers/fcr/synth.py) to try the portal with.

The direction comes from IN's content (Parquet magic or not); OUT ending in ``.gz`` writes gzip JSONL. Exit 0 on
success, 1 when IN cannot be converted (the message names the line or row and the reason)."""

from __future__ import annotations

import argparse
import sys

from workers.fcr.columnar import is_parquet
from workers.fcr.parquet_write import jsonl_to_parquet, parquet_to_jsonl
from workers.fcr.reader import FcrParseError
from workers.fcr.synth import SynthConfig, write_run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workers.fcr")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="fcr/1 JSONL <-> fcr-parquet/1 (direction from the input's content)")
    c.add_argument("src")
    c.add_argument("dst")
    c.add_argument("--float32", action="store_true", help="store log-probs as float32 (default float64: lossless)")
    c.add_argument("--row-group-tokens", type=int, default=1 << 16)
    g = sub.add_parser("synth", help="write a synthetic fcr/1 run log (.jsonl, or .jsonl.gz for gzip)")
    g.add_argument("dst")
    g.add_argument("--run-id", default="demo-run", help="the records' run_id: the run's name in the portal")
    g.add_argument("--trajectories", type=int, default=64)
    g.add_argument("--steps", type=int, default=8)
    g.add_argument("--noise", type=float, default=0.02, help="trainer log-space noise (bf16-like: 0.02)")
    g.add_argument("--spike-rate", type=float, default=0.002, help="per-token rate of a large disagreement")
    g.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.cmd == "synth":
        if args.trajectories < 1 or args.steps < 1 or args.noise < 0 or not 0 <= args.spike_rate <= 1:
            ap.error("--trajectories and --steps must be at least 1, --noise at least 0, --spike-rate in [0, 1]")
        out = write_run(
            args.dst,
            SynthConfig(
                trajectories=args.trajectories,
                steps=args.steps,
                noise=args.noise,
                spike_rate=args.spike_rate,
                run_id=args.run_id,
                seed=args.seed,
            ),
        )
        print(f"{args.dst}: run {args.run_id}, {out['records']} records, {out['tokens']} response tokens")
        return 0
    try:
        if is_parquet(args.src):
            out = parquet_to_jsonl(args.src, args.dst)
            print(f"{args.src} -> {args.dst}: {out['records']} records, {out['bytes']} bytes (fcr/1 JSONL)")
        else:
            out = jsonl_to_parquet(
                args.src,
                args.dst,
                float_type="float32" if args.float32 else "float64",
                row_group_tokens=args.row_group_tokens,
            )
            print(
                f"{args.src} -> {args.dst}: {out['records']} records in {out['row_groups']} row group(s), "
                f"{out['bytes']} bytes (fcr-parquet/1)"
            )
    except FcrParseError as exc:
        print(f"{args.src}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
