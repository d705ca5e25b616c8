"""One run certified by 1 and by 2 Celery worker processes (issue #18 part 2): throughput and the ratio.

A private portal on loopback (bench/portal_env.py: its own PostgreSQL, Redis, daphne; nothing shared is touched)
gets one plain JSONL upload (``--mb``); a preparation worker validates it and is then killed, and the upload's other
follow-up jobs are cancelled, so that only its certification runs afterwards. The certification job is then run
again, from scratch, under each configuration, ``--rounds`` times, interleaved:

* ``one task``      — CERTIFY_CHUNK_BYTES=0, one worker process: the whole file in one task (the baseline);
* ``chunks x1``     — CERTIFY_CHUNK_BYTES=``--chunk-mb``, one worker process: every chunk in turn, then the merge;
* ``chunks x2``     — the same with two worker processes (two ``celery worker -c 1``, as two machines would be).

Each worker process runs with ``OMP_NUM_THREADS=--threads`` (default 1): with torch's default (one thread per core)
a single process already spreads its tensor passes over both cores, and two processes oversubscribe them.

Before each timed run every worker process certifies a small log, untimed: long-lived workers have torch, the engine
and the compiled kernel loaded (a cold process spends ~6 s on that here, which a 20 s run cannot hide).
Throughput = the run's tokens / (job finished_at − started_at), both stamped by the workers in the database; the
best round of each configuration is reported, with the ratios ``chunks x2 / chunks x1`` (scaling) and ``chunks x1
/ one task`` (what chunking costs). The certificates of all runs are compared (summary, bounds: equal or not).
The load average is printed before and after: on a shared machine the ratio is only as good as the cores are free.

    .venv/bin/python bench/scale.py                      # 64 MiB log, 8 MiB chunks, 2 rounds
    .venv/bin/python bench/scale.py --mb 32 --chunk-mb 4 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.portal_env import PortalEnv, multipart, request, wait_until

RERUN = """
from audit_portal.certificates.models import CertificateChunk
from audit_portal.jobs.models import Job
from audit_portal.jobs.services import enqueue_job
CertificateChunk.objects.filter(job_id={job}).delete()
Job.objects.filter(pk={job}).update(state="queued", attempts=0, started_at=None, finished_at=None, progress=0,
                                    result={{}}, error="", message="bench rerun")
enqueue_job({job})
"""


def write_log_file(path: Path, mb: float) -> Path:
    """The benches' plain JSONL run log of about ``mb`` MiB (workers.fcr.synth: top-8 lists, 64-512 tokens)."""
    from workers.fcr.synth import SynthConfig, write_run

    write_run(
        path,
        SynthConfig(trajectories=64, response_len=(64, 512), top_k=8, seed=7),
        compress=False,
        target_bytes=int(mb * 2**20),
    )
    return path


def write_log(mb: float) -> bytes:
    with tempfile.TemporaryDirectory(prefix="ap-scale-") as tmp:
        return write_log_file(Path(tmp) / "run.jsonl", mb).read_bytes()


def small_log(seed: int) -> bytes:
    import orjson

    from workers.fcr.synth import SynthConfig, iter_run

    return b"".join(orjson.dumps(r) + b"\n" for r in iter_run(SynthConfig(trajectories=2, seed=seed)))


def upload_log(env, data: bytes, name: str) -> int:
    body, ctype = multipart(data, name)
    status, up, _ = request(
        "POST", f"{env.base_urls[0]}/api/v1/projects/{env.slug}/uploads/", env.token, body, ctype, timeout=600
    )
    if status != 201:
        raise SystemExit(f"upload refused: {status} {up}")
    return up["id"]


def job_row(env, job: int) -> dict:
    state, secs, result = env.sql(
        f"select state, extract(epoch from finished_at - started_at), result from jobs_job where id={job}"
    )[0]
    return {"state": state, "seconds": float(secs) if secs else None, "result": json.loads(result or "{}")}


def phases(env, job: int) -> tuple[float, float, int]:
    """(seconds from the job's start to its last stored chunk, seconds from there to the end: merge, storing the
    certificate and its signature, drawing the figures; the worker processes that stored chunks); the one-task run
    has no chunk rows: (total, 0, 1)."""
    chunked, tail, processes = env.sql(
        f"select extract(epoch from max(c.created_at) - j.started_at), extract(epoch from j.finished_at - "
        f"max(c.created_at)), count(distinct c.worker) from jobs_job j left join certificates_certificatechunk c "
        f"on c.job_id = j.id where j.id={job} group by j.id"
    )[0]
    return (float(chunked), float(tail), int(processes)) if chunked else (job_row(env, job)["seconds"], 0.0, 1)


def certificate(env, upload: int) -> str:
    rows = env.sql(
        f"select summary::text || bounds::text from certificates_runcertificate where upload_id={upload} "
        f"and state='complete'"
    )
    return rows[0][0] if rows else ""


def finished(env, job: int) -> bool:
    return job_row(env, job)["state"] in ("succeeded", "failed", "cancelled")


POLL_S = 1.0  # how often the bench asks whether the timed job has finished


def run_config(
    env, job: int, upload: int, processes: int, chunk_bytes: int, timeout: float, threads: int, warm_jobs: list[int]
) -> dict:
    for i in range(processes):
        env.start_worker(
            f"scale{i}", concurrency=1, env={"CERTIFY_CHUNK_BYTES": str(chunk_bytes), "OMP_NUM_THREADS": str(threads)}
        )
    try:
        # steady state, as long-lived workers are: each process first certifies a small log (imports torch and the
        # engine, loads the compiled kernel, opens its database connection: ~6 s at load 5 here), untimed
        warm = warm_jobs[:processes]
        env.manage("shell", "-c", "".join(RERUN.format(job=j) for j in warm))
        if not wait_until(lambda: all(finished(env, j) for j in warm), timeout, 0.25):
            raise RuntimeError(f"warm-up did not finish; logs in {env.logs}")
        env.manage("shell", "-c", RERUN.format(job=job))
        # polled once a second: the time is the workers' own stamps in the database, so a slower poll changes no
        # figure, and each poll is a psql process and a PostgreSQL backend on the two cores the workers are timed on
        ok = wait_until(lambda: finished(env, job), timeout, POLL_S)
        row = job_row(env, job)
        if not ok or row["state"] != "succeeded":
            raise RuntimeError(f"certification did not succeed: {row}; logs in {env.logs}")
        row["certificate"] = certificate(env, upload)
        row["chunk_phase"], row["tail"], row["processes"] = phases(env, job)
        return row
    finally:
        env.stop_workers()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=64.0, help="size of the plain JSONL run log (MiB)")
    ap.add_argument("--chunk-mb", type=float, default=8.0, help="CERTIFY_CHUNK_BYTES for the chunked runs (MiB)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one certification may take")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of each worker process (torch's intra-op threads; 1 = one core a process)",
    )
    args = ap.parse_args(argv)
    chunk_bytes = int(args.chunk_mb * 2**20)
    print(
        f"load average before: {os.getloadavg()}  (cpus: {os.cpu_count()}; worker threads: {args.threads})", flush=True
    )
    data = write_log(args.mb)
    configs = [("one task", 1, 0), ("chunks x1", 1, chunk_bytes), ("chunks x2", 2, chunk_bytes)]
    with PortalEnv(pg_port=55452, redis_port=56399, web_port=58151) as env:
        env.start_web(1)
        env.start_worker("prep", concurrency=1)
        upload = upload_log(env, data, "scale.jsonl")
        small = [upload_log(env, small_log(seed), f"warm-{seed}.jsonl") for seed in (1, 2)]
        uploads = ",".join(str(u) for u in [upload, *small])
        validated = wait_until(
            lambda: env.sql(f"select count(*) from jobs_job where subject_id in ({uploads}) and kind='certify_upload'")[
                0
            ][0]
            == "3",
            args.timeout,
            0.5,
        )
        if not validated:
            raise SystemExit(f"validation did not finish; logs in {env.logs}")
        env.kill_worker("prep")  # what it had started or fetched stays unacknowledged: never redelivered here
        env.sql(
            f"update jobs_job set state='cancelled' where subject_id in ({uploads}) and kind <> 'certify_upload' "
            f"and state in ('queued', 'running')"
        )
        job, *warm_jobs = [
            int(env.sql(f"select id from jobs_job where subject_id={u} and kind='certify_upload'")[0][0])
            for u in [upload, *small]
        ]
        results: dict = {name: [] for name, _, _ in configs}
        for r in range(args.rounds):
            for name, processes, cb in configs:
                row = run_config(env, job, upload, processes, cb, args.timeout, args.threads, warm_jobs)
                tokens = row["result"].get("tokens") or 0
                row["tokens_per_s"] = tokens / row["seconds"]
                results[name].append(row)
                print(
                    f"round {r + 1} {name:10s} {row['seconds']:7.2f} s  {row['tokens_per_s']:10.0f} tokens/s  "
                    f"chunks {row['result'].get('chunks', 1)} by {row['processes']} proc: start to last chunk {row['chunk_phase']:6.2f} s, "
                    f"then merge/store/figures {row['tail']:5.2f} s  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    best = {name: max(rows, key=lambda x: x["tokens_per_s"]) for name, rows in results.items()}
    certs = {row["certificate"] for rows in results.values() for row in rows}
    print(
        f"\nlog {len(data) / 2**20:.1f} MiB, {best['one task']['result'].get('tokens')} tokens; "
        f"chunks of {args.chunk_mb} MiB: {best['chunks x2']['result'].get('chunks')}"
    )
    for name in results:
        print(f"  {name:10s} best {best[name]['seconds']:7.2f} s  {best[name]['tokens_per_s']:10.0f} tokens/s")
    print(
        f"  scaling  chunks x2 / chunks x1 = {best['chunks x2']['tokens_per_s'] / best['chunks x1']['tokens_per_s']:.2f}x"
        f"  (target >= 1.7x on 2 cores)"
    )
    print(
        f"  chunking chunks x1 / one task  = {best['chunks x1']['tokens_per_s'] / best['one task']['tokens_per_s']:.2f}x"
    )
    phase = {name: min(row["chunk_phase"] for row in rows) for name, rows in results.items()}
    print(
        f"  the parallel part alone (start to last chunk, best): x1 {phase['chunks x1']:.2f} s, x2 "
        f"{phase['chunks x2']:.2f} s: {phase['chunks x1'] / phase['chunks x2']:.2f}x"
    )
    print(f"  certificates of every run equal (summary, bounds): {'yes' if len(certs) == 1 else 'NO'}")
    print(f"load average after: {os.getloadavg()}")
    return 0 if len(certs) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
