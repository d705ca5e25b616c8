"""Bounded load on loopback against a production-shaped portal: several daphne processes, a Celery worker,
a private PostgreSQL and Redis (bench/portal_env.py; the machine's shared services are never touched).

Concurrency steps up (default 1, 2, 4, 8, 16, 32 clients, 15 s each). Every client loops over a mix of API reads
(upload list, upload detail, job list, job detail, run certificate), the project and run pages (session cookie) and,
one request in fourteen, a small unique upload.
Websocket subscribers stay connected to the project feed throughout and count the job events they receive.
Per step and endpoint it prints throughput and p50/p99 latency, and the step at which errors start.

    .venv/bin/python bench/load.py                         # the full run (about 3 minutes after seeding)
    .venv/bin/python bench/load.py --steps 1,4,16 --seconds 10 --web-processes 2 --json out.json

Absolute numbers depend on the machine and on what else runs on it (the script prints the load average before
and after); compare ratios between steps and endpoints, not absolute values across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import itertools
import json
import os
import random
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.portal_env import PortalEnv, multipart, request, synth_log, wait_until

MIX = [
    ("upload_list", 3),
    ("upload_detail", 3),
    ("job_list", 2),
    ("job_detail", 2),
    ("run_certificate", 1),
    ("upload_post", 1),
    ("project_page", 1),
    ("run_page", 1),
]


GET_PATHS = {
    "upload_list": lambda slug, ids, rng: f"/api/v1/projects/{slug}/uploads/?page_size=50",
    "upload_detail": lambda slug, ids, rng: f"/api/v1/uploads/{rng.choice(ids['uploads'])}/",
    "job_list": lambda slug, ids, rng: f"/api/v1/projects/{slug}/jobs/?page_size=50",
    "job_detail": lambda slug, ids, rng: f"/api/v1/jobs/{rng.choice(ids['jobs'])}/",
    "run_certificate": lambda slug, ids, rng: f"/api/v1/runs/{rng.choice(ids['runs'])}/certificate/",
    "project_page": lambda slug, ids, rng: f"/p/{slug}/",
    "run_page": lambda slug, ids, rng: f"/p/{slug}/runs/{rng.choice(ids['runs'])}/",
}
UPLOAD_COUNTER = itertools.count()
PHASE = ["setup"]  # what the load generator is doing now, for the websocket failure counts


class Client:
    """One keep-alive connection per client thread to one daphne process."""

    def __init__(self, base: str, token: str, cookie: str = ""):
        host, port = base.removeprefix("http://").split(":")
        self.host, self.port, self.token, self.cookie = host, int(port), token, cookie
        self.conn = None

    def call(self, method: str, path: str, body=None, ctype=None, timeout=30.0) -> int:
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            # pages are for people (session cookie), the API for keys
            headers = (
                {"Cookie": f"sessionid={self.cookie}"}
                if path.startswith("/p/")
                else {"Authorization": f"Bearer {self.token}"}
            )
            if ctype:
                headers["Content-Type"] = ctype
            try:
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                resp.read()
                if resp.getheader("connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return resp.status
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    return 0
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                return 0
        return 0


def run_step(env: PortalEnv, clients: int, seconds: float, ids: dict, seed: int) -> dict:
    samples: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, dict] = defaultdict(lambda: defaultdict(int))
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    kinds = [k for k, w in MIX for _ in range(w)]
    slug = env.slug

    def worker(n: int):
        rng = random.Random(seed * 1000 + n)
        client = Client(env.base_urls[n % len(env.base_urls)], env.token, ids["cookie"])
        while time.monotonic() < stop:
            kind = rng.choice(kinds)
            body = ctype = None
            method = "GET"
            if kind in GET_PATHS:
                path = GET_PATHS[kind](slug, ids, rng)
            else:
                method, path = "POST", f"/api/v1/projects/{slug}/uploads/"
                k = next(UPLOAD_COUNTER)  # unique bytes per upload across the whole run: every POST is a new upload
                body, ctype = multipart(ids["small_log"] + b"\n" * (1 + k), f"load-{seed}-{n}-{k}.jsonl")
            started = time.perf_counter()
            status = client.call(method, path, body, ctype)
            elapsed = time.perf_counter() - started
            with lock:
                if status in (200, 201):
                    samples[kind].append(elapsed)
                else:
                    errors[kind][status] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    out = {"clients": clients, "seconds": round(wall, 1), "endpoints": {}}
    for kind, _ in MIX:
        xs = sorted(samples.get(kind, []))
        errs = dict(errors.get(kind, {}))
        out["endpoints"][kind] = {
            "ok": len(xs),
            "errors": errs,
            "rps": round(len(xs) / wall, 1),
            "p50_ms": round(1000 * xs[len(xs) // 2], 1) if xs else None,
            "p99_ms": round(1000 * xs[min(len(xs) - 1, int(len(xs) * 0.99))], 1) if xs else None,
        }
    total_ok = sum(e["ok"] for e in out["endpoints"].values())
    out["total_rps"] = round(total_ok / wall, 1)
    out["error_count"] = sum(sum(e["errors"].values()) for e in out["endpoints"].values())
    return out


# --------------------------------------------------------------------------------------------- websockets
async def ws_subscriber(host: str, port: int, path: str, cookie: str, stop: asyncio.Event, stats: dict):
    """A minimal RFC 6455 client: handshake with the session cookie, then count text frames (server frames are
    unmasked); it sends only pongs."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: http://{host}:{port}\r\n"
                f"Cookie: sessionid={cookie}\r\n\r\n"
            ).encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            stats["refused"] += 1
            writer.close()
            return
        stats["connected"] += 1
        while not stop.is_set():
            try:
                hdr = await asyncio.wait_for(reader.readexactly(2), 0.5)
            except asyncio.TimeoutError:
                continue
            length = hdr[1] & 0x7F
            if length == 126:
                length = int.from_bytes(await reader.readexactly(2), "big")
            elif length == 127:
                length = int.from_bytes(await reader.readexactly(8), "big")
            payload = await reader.readexactly(length)
            opcode = hdr[0] & 0x0F
            if opcode == 0x9:  # daphne pings every 20 s and drops a client that does not answer: pong (masked)
                mask = os.urandom(4)
                writer.write(
                    bytes([0x8A, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
                )
                stats["pings_answered"] += 1
                continue
            if opcode == 0x8:  # close
                stats["closed_by_server"] += 1
                return
            stats["events"] += 1
        writer.close()
    except Exception as exc:  # noqa: BLE001 - a failed request is counted as an error of the load run, not a crash
        stats["failed"] += 1
        stats[f"failed:{type(exc).__name__} during {PHASE[0]}"] += 1


def start_subscribers(env: PortalEnv, count: int, cookie: str):
    stats = defaultdict(int)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def runner():
        asyncio.set_event_loop(loop)
        tasks = []
        for i in range(count):
            base = env.base_urls[i % len(env.base_urls)].removeprefix("http://")
            host, port = base.split(":")
            tasks.append(ws_subscriber(host, int(port), f"/ws/projects/{env.slug}/feed/", cookie, stop, stats))
        loop.run_until_complete(asyncio.gather(*tasks))

    thread = threading.Thread(target=runner, daemon=True)
    thread.start()
    return stats, lambda: (loop.call_soon_threadsafe(stop.set), thread.join(10))


# ------------------------------------------------------------------------------------------------- setup
def seed(env: PortalEnv, uploads: int) -> dict:
    """Uploads through the API (processed by the worker: jobs, runs, certificates exist for the reads)."""
    t0 = time.monotonic()
    for i in range(uploads):
        body, ctype = multipart(synth_log(6, seed=10_000 + i, response_len=(8, 32)), f"seed-{i}.jsonl.gz")
        status, _, _ = request(
            "POST", f"{env.base_urls[0]}/api/v1/projects/{env.slug}/uploads/", env.token, body, ctype
        )
        assert status == 201, status
    done = wait_until(
        lambda: int(
            env.sql("select count(*) from jobs_job where state not in ('succeeded','failed','cancelled')")[0][0]
        )
        == 0,
        900,
        1.0,
    )
    ids = {
        "uploads": [int(r[0]) for r in env.sql("select id from runs_upload")],
        "jobs": [int(r[0]) for r in env.sql("select id from jobs_job")],
        "runs": [
            int(r[0])
            for r in env.sql(
                "select distinct run_id from certificates_runcertificate where state='complete' and run_id is not null"
            )
        ],
    }
    ids["small_log"] = synth_log(2, seed=99, gzip_it=False, response_len=(8, 16))
    print(
        f"seeded {uploads} uploads, {len(ids['jobs'])} jobs, {len(ids['runs'])} certified runs in "
        f"{time.monotonic() - t0:.0f} s (all jobs finished: {done})",
        flush=True,
    )
    return ids


def session_cookie(env: PortalEnv) -> str:
    code = (
        "from django.contrib.auth import get_user_model; from django.contrib.sessions.backends.db import SessionStore;"
        "from django.contrib.auth import SESSION_KEY, BACKEND_SESSION_KEY, HASH_SESSION_KEY;"
        "u = get_user_model().objects.get(username='bench'); s = SessionStore();"
        "s[SESSION_KEY] = str(u.pk); s[BACKEND_SESSION_KEY] = 'django.contrib.auth.backends.ModelBackend';"
        "s[HASH_SESSION_KEY] = u.get_session_auth_hash(); s.create(); print(s.session_key)"
    )
    return env.manage("shell", "-c", code).stdout.strip().splitlines()[-1]


def big_upload(env: PortalEnv, size_mb: int) -> dict:
    """One large plain-JSONL upload through daphne (streamed, hashed, stored), then its validation job."""
    from bench.ingest import make_file

    path = env.dir / "big.jsonl"
    info = make_file(path, size_mb, compress=False)
    body, ctype = multipart(path.read_bytes(), "big.jsonl")
    status, data, secs = request(
        "POST", f"{env.base_urls[0]}/api/v1/projects/{env.slug}/uploads/", env.token, body, ctype, timeout=1800
    )
    out = {
        "mb": size_mb,
        "records": info["records"],
        "status": status,
        "upload_seconds": round(secs, 1),
        "upload_mb_per_s": round(size_mb / secs, 1),
    }
    if status == 201:
        upload_id = data["id"]
        wait_until(
            lambda: env.sql(f"select state from jobs_job where kind='validate_upload' and subject_id={upload_id}")[0][0]
            in ("succeeded", "failed"),
            1800,
            1.0,
        )
        row = env.sql(
            "select state, extract(epoch from finished_at - started_at) from jobs_job "
            f"where kind='validate_upload' and subject_id={upload_id}"
        )[0]
        out.update(
            validation_state=row[0],
            validation_seconds=round(float(row[1]), 1),
            validation_mb_per_s=round(size_mb / float(row[1]), 1),
        )
        wait_until(
            lambda: env.sql(f"select state from jobs_job where kind='certify_upload' and subject_id={upload_id}")[0][0]
            in ("succeeded", "failed"),
            1800,
            1.0,
        )
        state, secs, tokens, seqs = env.sql(
            "select state, extract(epoch from finished_at - started_at), result->>'tokens', result->>'sequences' "
            f"from jobs_job where kind='certify_upload' and subject_id={upload_id}"
        )[0]
        out.update(
            certify_state=state,
            certify_seconds=round(float(secs), 1),
            certify_tokens=int(tokens or 0),
            certify_sequences=int(seqs or 0),
            certify_tokens_per_s=round(int(tokens or 0) / float(secs)),
            certify_sequences_per_s=round(int(seqs or 0) / float(secs)),
        )
    print(f"big upload: {out}", flush=True)
    return out


def job_throughput(env: PortalEnv) -> dict:
    """Per job kind: how many finished, median seconds; certification tokens/s and sequence rows/s per worker process,
    and what a sequence-summary row costs in PostgreSQL (table + indexes)."""
    out = {}
    for kind, n, median, total in env.sql(
        "select kind, count(*), percentile_cont(0.5) within group (order by extract(epoch from finished_at - started_at)),"
        " sum(extract(epoch from finished_at - started_at)) from jobs_job where state='succeeded' group by kind"
    ):
        out[kind] = {"succeeded": int(n), "median_s": round(float(median), 2), "busy_s": round(float(total), 1)}
    tokens, seqs, busy = env.sql(
        "select coalesce(sum((result->>'tokens')::bigint),0), coalesce(sum((result->>'sequences')::bigint),0),"
        " coalesce(sum(extract(epoch from finished_at - started_at)),0) from jobs_job"
        " where kind='certify_upload' and state='succeeded'"
    )[0]
    if float(busy) > 0:
        out["certify_tokens_per_s"] = round(int(tokens) / float(busy))
        out["certify_sequences_per_s"] = round(int(seqs) / float(busy))
        out["certificates_per_s"] = round(out["certify_upload"]["succeeded"] / float(busy), 3)
    rows, size = env.sql(
        "select count(*), pg_total_relation_size('certificates_sequencesummary') from certificates_sequencesummary"
    )[0]
    if int(rows):
        out["bytes_per_sequence_row"] = round(int(size) / int(rows))
    print(f"jobs: {out}", flush=True)
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="1,2,4,8,16,32")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--web-processes", type=int, default=3)
    parser.add_argument("--worker-concurrency", type=int, default=1)
    parser.add_argument("--seed-uploads", type=int, default=60)
    parser.add_argument("--subscribers", type=int, default=20)
    parser.add_argument("--big-upload-mb", type=int, default=0, help="also time one upload of this size (MiB)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--worktree", action="store_true", help="run the working tree (default: git HEAD exported)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    steps = [int(x) for x in args.steps.split(",")]
    print(f"machine: {os.cpu_count()} CPUs, load average {loadavg()} before the run", flush=True)
    env = PortalEnv(pg_port=55532, redis_port=56479, web_port=58101, keep=args.keep, snapshot=not args.worktree)
    results = {"machine": {"cpus": os.cpu_count(), "loadavg_before": loadavg()}, "steps": []}
    try:
        env.setup()
        env.start_web(args.web_processes)
        env.start_worker("load", concurrency=args.worker_concurrency)
        ids = seed(env, args.seed_uploads)
        ids["cookie"] = session_cookie(env)
        stats, stop_subscribers = start_subscribers(env, args.subscribers, ids["cookie"])
        wait_until(lambda: stats["connected"] + stats["refused"] + stats["failed"] >= args.subscribers, 30)
        print(f"websocket subscribers: {dict(stats)}", flush=True)
        first_error = None
        for i, clients in enumerate(steps):
            la = loadavg()
            PHASE[0] = f"the {clients}-client step"
            step = run_step(env, clients, args.seconds, ids, seed=i)
            step["loadavg_start"] = la
            results["steps"].append(step)
            line = "  ".join(
                f"{k} {e['rps']}/s p50 {e['p50_ms']} p99 {e['p99_ms']}" + (f" ERR {e['errors']}" if e["errors"] else "")
                for k, e in step["endpoints"].items()
            )
            print(
                f"[{clients:>3} clients] total {step['total_rps']}/s, errors {step['error_count']} (load {la})\n    {line}",
                flush=True,
            )
            if step["error_count"] and first_error is None:
                first_error = clients
        PHASE[0] = "shutdown of the subscribers"
        stop_subscribers()
        results["websockets"] = dict(stats)
        results["errors_start_at_clients"] = first_error
        if args.big_upload_mb:
            results["big_upload"] = big_upload(env, args.big_upload_mb)
        results["job_throughput"] = job_throughput(env)
        backlog = env.sql("select state, count(*) from jobs_job group by state order by state")
        results["jobs_after"] = {s: int(n) for s, n in backlog}
        results["machine"]["loadavg_after"] = loadavg()
        print(f"websocket subscribers at the end: {dict(stats)}")
        print(
            f"errors start at: {first_error or 'no errors at any step'} clients; jobs after the run: {results['jobs_after']}"
        )
        print(f"load average after: {loadavg()}")
    finally:
        env.teardown()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
