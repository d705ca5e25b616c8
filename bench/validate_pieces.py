"""Validation of one upload in pieces (workers/fcr/validate_pieces.py): 1 and 2 processes against one pass.

In process, without the queue or the database (the Celery side is the same as for chunked certification, whose
overheads bench/scale.py measures): a plain JSONL log (``--mb``) is validated

* ``one pass``   — ``validate_file``, the baseline;
* ``pieces x1``  — every piece (``--piece-mb``) by ``validate_piece`` in turn in this process, then ``merge_pieces``;
* ``pieces x2``  — the pieces shared by a pool of two processes (as two workers would), then the merge here.

Each configuration runs ``--rounds`` times, interleaved; the best round is reported with the ratios ``pieces x2 /
pieces x1`` and ``pieces x1 / one pass``, and every merged summary is compared with the one-pass summary. The pool's
processes are started and warmed (imports) before the timing. Print the load average: on a shared machine a ratio
is only as good as the cores are free.

    .venv/bin/python bench/validate_pieces.py --mb 64 --piece-mb 8 --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.fcr.chunks import chunk_ranges
from workers.fcr.validate import validate_file
from workers.fcr.validate_pieces import merge_pieces, validate_piece


def write_log(path: Path, mb: float) -> None:
    import orjson

    from workers.fcr.synth import SynthConfig, iter_run

    with open(path, "wb") as out:
        seed = 0
        while out.tell() < mb * 2**20:
            for rec in iter_run(SynthConfig(trajectories=64, seed=seed, run_id=f"run-{seed % 3}")):
                out.write(orjson.dumps(rec) + b"\n")
            seed += 1


def _piece(args):
    path, chunk = args
    return validate_piece(path, chunk)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=64.0)
    ap.add_argument("--piece-mb", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"load average before: {os.getloadavg()}  (cpus: {os.cpu_count()})", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.jsonl"
        write_log(path, args.mb)
        chunks = chunk_ranges(path, int(args.piece_mb * 2**20))
        jobs = [(str(path), c.to_dict()) for c in chunks]
        times: dict[str, list[float]] = {"one pass": [], "pieces x1": [], "pieces x2": []}
        equal = True
        with mp.get_context("fork").Pool(2) as pool:
            pool.map(_piece, jobs[:2])  # both processes warm
            for r in range(args.rounds):
                t0 = time.perf_counter()
                reference = validate_file(path)
                times["one pass"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                merged = merge_pieces([_piece(j) for j in jobs], path=path)
                times["pieces x1"].append(time.perf_counter() - t0)
                equal &= merged == reference
                t0 = time.perf_counter()
                merged = merge_pieces(pool.map(_piece, jobs, chunksize=1), path=path)
                times["pieces x2"].append(time.perf_counter() - t0)
                equal &= merged == reference
                print(
                    f"round {r + 1}: "
                    + "  ".join(f"{k} {v[-1]:6.2f} s" for k, v in times.items())
                    + f"  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
        size = path.stat().st_size
    best = {k: min(v) for k, v in times.items()}
    print(f"\nlog {size / 2**20:.1f} MiB, {reference['records']} records; {len(chunks)} pieces of {args.piece_mb} MiB")
    for k, v in best.items():
        print(f"  {k:10s} best {v:6.2f} s  {size / 2**20 / v:6.1f} MiB/s")
    print(f"  scaling  pieces x2 / pieces x1 = {best['pieces x1'] / best['pieces x2']:.2f}x")
    print(f"  cutting  pieces x1 / one pass  = {best['one pass'] / best['pieces x1']:.2f}x")
    print(f"  every merged summary equal to the one-pass summary: {'yes' if equal else 'NO'}")
    print(f"load average after: {os.getloadavg()}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
