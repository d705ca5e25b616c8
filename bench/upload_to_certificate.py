"""Upload-to-certificate of one large run log through the portal vs ``certify_file`` on the same file (issue #26).

Target (issue #26): for a 1 GB log, upload-to-certificate is at most 1.5x ``certify_file`` (idle machine).

A private portal on loopback (bench/portal_env.py: its own PostgreSQL, Redis and web server, ``scripts/web`` as
``scripts/up`` starts it; nothing shared is touched) with the shipped worker, ``scripts/worker general`` as
``scripts/up`` starts it: queues cpu,gpu, a prefork pool of 2 processes, each single-threaded. The workers first
certify a small upload, untimed (a long-lived worker has torch and the engine loaded). Then, in this process:

1. the baseline: ``certify_file(path)`` (the engine alone: no queue, no database), ``--baseline-rounds`` times, best;
2. the timed run: the client library's ``Client.upload`` of the same file (above its ``parts_above``, 64 MiB by
   default, a resumable upload in 16 MiB parts; below, one streamed request), then the upload's ``certify_upload``
   job is polled until it has finished. The time ends at the job's ``finished_at`` (stamped by the worker after the
   certificate is stored, signed and its figures drawn). It is reported from two starts: from the call (the client
   first reads the whole file for its SHA-256) and from the end of that hash, i.e. the first byte sent.

Printed: both times, the ratios to the baseline, where the time went (hash, parts, completion; validation in pieces;
certification planning, pieces and merge; the fidelity audit that shares the pool), the load average before, at each
step and after, and whether the stored certificate equals ``certify_file``'s (summary and bounds).

    .venv/bin/python bench/upload_to_certificate.py --mb 48                  # smoke: one request
    .venv/bin/python bench/upload_to_certificate.py --mb 48 --parts-above 8  # smoke: in parts
    .venv/bin/python bench/upload_to_certificate.py --mb 1024                # the issue's 1 GB log
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))  # the client library, as users run it
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.portal_env import PortalEnv, wait_until
from bench.scale import small_log, write_log_file


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def upload_jobs(env, upload: int, t0: float) -> list[dict]:
    """The upload's jobs with their created/started/finished times as seconds after ``t0`` (epoch)."""
    rows = env.sql(
        "select kind, state, extract(epoch from created_at), extract(epoch from started_at), "
        f"extract(epoch from finished_at), result from jobs_job where subject_kind='upload' and subject_id={upload} "
        "order by id"
    )

    def rel(x):
        return float(x) - t0 if x else None

    return [
        {
            "kind": k,
            "state": s,
            "created": rel(c),
            "started": rel(st),
            "finished": rel(f),
            "result": json.loads(r or "{}"),
        }
        for k, s, c, st, f, r in rows
    ]


def job(jobs: list[dict], kind: str) -> dict | None:
    return next((j for j in jobs if j["kind"] == kind), None)


def pieces(env, table: str, upload: int, kind: str, t0: float) -> tuple[int, float | None, float | None]:
    """(count, first stored, last stored) of a job's pieces, seconds after ``t0``."""
    n, first, last = env.sql(
        f"select count(*), extract(epoch from min(p.created_at)), extract(epoch from max(p.created_at)) from {table} p "
        f"join jobs_job j on j.id = p.job_id where j.subject_kind='upload' and j.subject_id={upload} and j.kind='{kind}'"
    )[0]
    return int(n), float(first) - t0 if first else None, float(last) - t0 if last else None


def stored_certificate(env, upload: int) -> dict | None:
    rows = env.sql(
        f"select summary::text, bounds::text from certificates_runcertificate where upload_id={upload} "
        "and state='complete'"
    )
    return {"summary": json.loads(rows[0][0]), "bounds": json.loads(rows[0][1])} if rows else None


def wait_certified(env, upload: int, timeout: float) -> bool:
    def done():
        rows = env.sql(
            f"select state from jobs_job where subject_kind='upload' and subject_id={upload} and kind in "
            "('certify_upload', 'validate_upload')"
        )
        states = [r[0] for r in rows]
        if "failed" in states or "cancelled" in states:
            raise RuntimeError(f"upload {upload}: a job ended {states}; logs in {env.logs}")
        stage = env.sql(f"select stage from runs_upload where id={upload}")[0][0]
        if stage == "invalid":
            raise RuntimeError(f"upload {upload} is invalid; logs in {env.logs}")
        return len(states) == 2 and all(s == "succeeded" for s in states)

    return wait_until(done, timeout, 0.2)


def baseline(path: Path, rounds: int) -> tuple[float, dict]:
    import torch

    from workers.certify.file import certify_file

    print(f"  this process: torch intra-op threads {torch.get_num_threads()}", flush=True)

    best, result = float("inf"), {}
    for _ in range(rounds):
        started = time.perf_counter()
        result = certify_file(path)
        best = min(best, time.perf_counter() - started)
        print(f"  certify_file: {time.perf_counter() - started:.2f} s  (load {load()})", flush=True)
    return best, result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=1024.0, help="size of the generated plain JSONL log (MiB, about)")
    ap.add_argument("--file", type=Path, help="use this JSONL log instead of generating one (e.g. kept by --keep)")
    ap.add_argument("--keep", type=Path, help="write the generated log here and leave it (for a second run)")
    ap.add_argument(
        "--parts-above", type=float, default=None, help="MiB: the client's parts_above (default: its own, 64 MiB)"
    )
    ap.add_argument("--baseline-rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds the upload may take to be certified")
    ap.add_argument(
        "--follow-ups-timeout",
        type=float,
        default=600.0,
        help="seconds to wait, after the certificate, for the upload's other jobs (the fidelity audit), to report them",
    )
    args = ap.parse_args(argv)

    from audit_portal_client import Client
    from audit_portal_client.upload import PARTS_ABOVE

    print(f"load average before: {load()}  (cpus: {os.cpu_count()})", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="ap-u2c-"))
    try:
        if args.file:
            path = args.file
        else:
            path = args.keep or tmp / "run.jsonl"
            started = time.perf_counter()
            write_log_file(path, args.mb)
            print(f"generated {path}: {time.perf_counter() - started:.1f} s", flush=True)
        size = path.stat().st_size
        parts_above = int(args.parts_above * 2**20) if args.parts_above is not None else PARTS_ABOVE
        with PortalEnv(pg_port=55462, redis_port=56409, web_port=58161) as env:
            env.start_web(1)
            env.start_shipped_worker("general")
            client = Client(env.base_urls[0], env.token, timeout=600)
            # warm-up, untimed: both pool processes load torch, the engine and the compiled kernel
            warm = tmp / "warm.jsonl"
            warm.write_bytes(small_log(1))
            warm_id = client.upload(env.slug, warm, parts_above=None)["id"]
            if not wait_certified(env, warm_id, 600):
                raise SystemExit(f"the warm-up upload was not certified; logs in {env.logs}")
            wait_until(
                lambda: env.sql("select count(*) from jobs_job where state in ('queued','running')")[0][0] == "0", 600
            )
            print(f"warm: the small upload certified (load {load()})", flush=True)

            print(f"baseline on {size / 2**20:.1f} MiB (load {load()})", flush=True)
            t_base, result = baseline(path, args.baseline_rounds)

            print(f"timed upload (load {load()})", flush=True)
            marks: dict[str, float] = {}

            def hashed(done, total):
                if done >= total:
                    marks.setdefault("hashed", time.time())

            def sent(done, total):
                marks.setdefault("first_progress", time.time())
                marks["sent"] = time.time()

            t0 = time.time()
            up = client.upload(
                env.slug,
                path,
                progress=sent,
                parts_above=parts_above,
                hash_progress=hashed,
                state_dir=tmp / "client-state",
            )
            t_answer = time.time()
            print(f"  upload {up['id']} answered after {t_answer - t0:.2f} s (load {load()})", flush=True)
            if not wait_certified(env, up["id"], args.timeout):
                raise SystemExit(f"upload {up['id']} was not certified in {args.timeout} s; logs in {env.logs}")
            load_end = load()
            jobs = upload_jobs(env, up["id"], t0)
            certify = job(jobs, "certify_upload")
            total = certify["finished"]
            t_hash = marks["hashed"] - t0 if "hashed" in marks else 0.0
            stored = stored_certificate(env, up["id"])
            n_val, v_first, v_last = pieces(env, "runs_validationpiece", up["id"], "validate_upload", t0)
            n_cert, c_first, c_last = pieces(env, "certificates_certificatechunk", up["id"], "certify_upload", t0)
            # let the other follow-ups (the fidelity audit) finish, to report them: the timed window has ended
            wait_until(
                lambda: all(j["finished"] is not None for j in upload_jobs(env, up["id"], t0)),
                args.follow_ups_timeout,
                0.5,
            )
            jobs = upload_jobs(env, up["id"], t0)

        tokens = result["summary"].get("tokens")
        print(f"\nlog {size / 2**20:.1f} MiB ({size} bytes), {tokens} tokens; in parts: {size > parts_above}")
        print(f"  certify_file (baseline, best of {args.baseline_rounds}): {t_base:8.2f} s")
        print(f"  upload-to-certificate from the call:               {total:8.2f} s   {total / t_base:.2f}x")
        print(
            f"  upload-to-certificate from the first byte sent:    {total - t_hash:8.2f} s   "
            f"{(total - t_hash) / t_base:.2f}x   (target <= 1.5x)"
        )
        print("  where the time went (seconds after the call):")
        print(f"    client SHA-256 of the file        done at {t_hash:8.2f}")
        if "sent" in marks:
            print(f"    last byte stored (parts)          done at {marks['sent'] - t0:8.2f}")
        print(f"    upload answered (complete/201)    done at {t_answer - t0:8.2f}")
        for j in jobs:
            started = f"{j['started']:8.2f}" if j["started"] is not None else "       -"
            finished = f"{j['finished']:8.2f}" if j["finished"] is not None else "       -"
            print(
                f"    job {j['kind']:18s} queued {j['created']:8.2f}  started {started}  finished {finished}  {j['state']}"
            )
        if n_val:
            print(f"    validation pieces: {n_val}, stored from {v_first:.2f} to {v_last:.2f}")
        if n_cert:
            print(
                f"    certification pieces: {n_cert}, stored from {c_first:.2f} to {c_last:.2f}; merge, store, sign and "
                f"figures after the last: {total - c_last:.2f} s"
            )
        same = stored == {
            "summary": json.loads(json.dumps(result["summary"])),
            "bounds": json.loads(json.dumps(result["bounds"])),
        }
        print(f"  stored certificate equals certify_file's (summary, bounds): {'yes' if same else 'NO'}")
        print(f"load average at the certificate: {load_end}; after: {load()}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # a --keep log lives outside it


if __name__ == "__main__":
    sys.exit(main())
