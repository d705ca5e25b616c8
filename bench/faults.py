"""Fault scenarios against a private, production-shaped portal (bench/portal_env.py: its own PostgreSQL cluster,
redis-server, daphne and Celery workers; the machine's shared services are never touched). Each scenario prints a
verdict (PASS/FAIL with the evidence) and ends with ``manage.py check_consistency``. Needs root (runuser for the
private PostgreSQL, mount for the small artifact filesystem).

    .venv/bin/python bench/faults.py                 # every scenario (about 3–4 minutes)
    .venv/bin/python bench/faults.py worker_killed redis_down
    .venv/bin/python bench/faults.py --keep          # keep the temp dir with all logs

Exit status: 0 when every scenario passed.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.portal_env import PortalEnv, multipart, request, synth_log, wait_until

HEARTBEAT = 6  # seconds: short, so a lost worker is noticed within the scenario
TERMINAL = ("succeeded", "failed", "cancelled")


class Scenario:
    def __init__(self, env: PortalEnv):
        self.env = env
        self.evidence: list[str] = []
        self.failures: list[str] = []

    def note(self, text: str) -> None:
        self.evidence.append(text)
        print(f"    {text}", flush=True)

    def expect(self, condition: bool, text: str) -> None:
        (self.evidence if condition else self.failures).append(text if condition else f"NOT: {text}")
        print(f"    {'ok ' if condition else 'FAIL'} {text}", flush=True)

    def upload(self, data: bytes, name: str, base: str | None = None):
        body, ctype = multipart(data, name)
        url = f"{base or self.env.base_urls[0]}/api/v1/projects/{self.env.slug}/uploads/"
        return request("POST", url, self.env.token, body, ctype)

    def get(self, path: str, base: str | None = None):
        return request("GET", f"{base or self.env.base_urls[0]}{path}", self.env.token)

    def jobs(self) -> list[dict]:
        rows = self.env.sql(
            "select id, kind, state, attempts, coalesce(error,''), subject_id from jobs_job order by id"
        )
        return [
            {
                "id": int(r[0]),
                "kind": r[1],
                "state": r[2],
                "attempts": int(r[3]),
                "error": r[4],
                "subject_id": int(r[5]) if r[5] else None,
            }
            for r in rows
        ]

    def wait_jobs_terminal(self, timeout: float, reap: bool = True) -> bool:
        """Wait for every job to finish; run the reaper as celery beat would (every few seconds here, 60 s in
        production), since lost workers and never-sent jobs are its to resend."""
        deadline = time.monotonic() + timeout
        last_reap = 0.0
        while time.monotonic() < deadline:
            if all(j["state"] in TERMINAL for j in self.jobs()):
                return True
            if reap and time.monotonic() - last_reap > HEARTBEAT:
                self.env.manage("reap_stale_jobs", check=False)
                last_reap = time.monotonic()
            time.sleep(0.5)
        return False

    def consistent(self) -> None:
        report = self.env.check_consistency(grace=0)
        self.expect(
            report.get("ok", False),
            "check_consistency: " + ("consistent" if report.get("ok") else "; ".join(report.get("problems", [])[:5])),
        )


# ------------------------------------------------------------------------------------------------ scenarios
def worker_killed(s: Scenario) -> None:
    """SIGKILL the worker while it certifies (once the pool child only, once the whole worker): the job is retried
    (reaper after the heartbeat timeout) and succeeds once; no duplicate results."""
    env = s.env
    for variant, children_only in (("pool child", True), ("whole worker", False)):
        env.start_worker("kill", concurrency=1)
        status, body, _ = s.upload(synth_log(900, seed=11 if children_only else 12), f"kill-{variant}.jsonl.gz")
        s.expect(status == 201, f"[{variant}] upload accepted ({status})")
        upload_id = body["id"]

        def certify_running():
            rows = env.sql(
                f"select state, progress from jobs_job where kind='certify_upload' and subject_id={upload_id}"
            )
            return rows and rows[0][0] == "running" and float(rows[0][1]) > 0.05

        s.expect(wait_until(certify_running, 120), f"[{variant}] certification running with progress")
        killed = env.kill_worker("kill", children_only=children_only)
        s.note(f"[{variant}] SIGKILL pids {killed}")
        time.sleep(1)
        state = env.sql(f"select state from jobs_job where kind='certify_upload' and subject_id={upload_id}")[0][0]
        s.note(f"[{variant}] right after the kill the job is {state}")
        if not children_only:
            env.start_worker("kill", concurrency=1)  # a replacement worker (what a supervisor would do)
        s.expect(s.wait_jobs_terminal(240), f"[{variant}] every job finished after the kill")
        env.stop_workers()
        [job] = [j for j in s.jobs() if j["kind"] == "certify_upload" and j["subject_id"] == upload_id]
        s.expect(
            job["state"] == "succeeded" and job["attempts"] >= 2 or job["state"] == "failed" and job["error"],
            f"[{variant}] certify job {job['state']} after {job['attempts']} attempt(s) {job['error'][:80]}",
        )
        certs = env.sql(f"select id, state, sequences from certificates_runcertificate where upload_id={upload_id}")
        rows = env.sql(
            f"select count(*), count(distinct line) from certificates_sequencesummary s join "
            f"certificates_runcertificate c on c.id=s.certificate_id where c.upload_id={upload_id}"
        )[0]
        s.expect(
            len(certs) == 1 and certs[0][1] == "complete" and rows[0] == rows[1] == certs[0][2],
            f"[{variant}] one complete certificate, {rows[0]} sequence rows for {certs[0][2] if certs else '?'} "
            "sequences, no line twice",
        )
    s.consistent()


def postgres_restart(s: Scenario) -> None:
    """Restart the private PostgreSQL (fast shutdown: connections cut) while 4 clients upload: every answer is a
    201 or a clear 503, nothing half-stored, and uploads succeed again without touching the portal."""
    env = s.env
    env.start_worker("pg", concurrency=1)
    files = [synth_log(30, seed=100 + i) for i in range(48)]
    results: list[tuple[int, str, int | None]] = []
    lock = threading.Lock()
    restarted = threading.Event()

    def client(indices):
        for i in indices:
            status, body, _ = s.upload(files[i], f"pg-{i}.jsonl.gz", base=env.base_urls[i % len(env.base_urls)])
            code = (body or {}).get("error", {}).get("code", "") if status >= 400 or status == 0 else ""
            with lock:
                results.append(
                    (status, code, (body or {}).get("id") if status in (200, 201) else None, restarted.is_set(), i)
                )

    def restarter():
        wait_until(lambda: len(results) >= 8, 60, 0.05)
        t0 = time.monotonic()
        env.restart_postgres("fast")
        restarted.set()
        s.note(f"PostgreSQL restarted (fast) after {len(results)} uploads, down {time.monotonic() - t0:.1f} s")

    r = threading.Thread(target=restarter)
    r.start()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(client, [range(k, 48, 4) for k in range(4)]))
    r.join()
    by = {}
    for status, code, *_ in results:
        by[(status, code)] = by.get((status, code), 0) + 1
    s.note(f"answers: {sorted(by.items())}")
    s.expect(
        all(st in (200, 201) or (st == 503 and code == "database_unavailable") for st, code, *_ in results),
        "every answer was 201/200 or 503 database_unavailable (no 500, no dropped connection)",
    )
    after = [x for x in results if x[3]]
    tail = after[-8:]
    s.expect(
        len(tail) >= 4 and all(st == 201 for st, *_ in tail),
        f"the last {len(tail)} uploads after the restart succeeded without restarting daphne or the worker",
    )
    # resubmit what was refused: clients retry a 503
    refused = [x[4] for x in results if x[0] == 503]
    for i in refused:
        status, *_ = s.upload(files[i], f"pg-{i}.jsonl.gz")
        s.expect(status in (200, 201), f"retry of refused upload {i}: {status}")
    stored = int(env.sql("select count(*) from runs_upload where duplicate_of_id is null")[0][0])
    s.expect(stored == 48, f"{stored} of 48 distinct uploads stored exactly once")
    s.expect(s.wait_jobs_terminal(300), "every job finished (the worker reconnected by itself)")
    failed = [j for j in s.jobs() if j["state"] == "failed"]
    s.note(f"failed jobs: {[(j['id'], j['kind'], j['error'][:60]) for j in failed]}")
    env.stop_workers()
    s.consistent()


def redis_down(s: Scenario) -> None:
    """Stop the private Redis (broker and channel layer): work that needs the queue answers 503 queue_unavailable
    fast, reads keep working, and once Redis is back the queued work is resent and finishes."""
    env = s.env
    env.start_worker("rd", concurrency=1)
    status, body, _ = s.upload(synth_log(20, seed=300), "before.jsonl.gz")
    s.expect(status == 201, f"upload before the outage: {status}")
    s.expect(s.wait_jobs_terminal(120), "its jobs finished")
    env.stop_redis()
    s.note("redis stopped")
    answers = []
    for i in range(8):
        status, body, secs = s.upload(synth_log(20, seed=310 + i), f"during-{i}.jsonl.gz")
        answers.append(
            (
                status,
                (body or {}).get("error", {}).get("code"),
                round(secs, 2),
                (body or {}).get("error", {}).get("detail", {}).get("upload"),
            )
        )
    s.note(f"uploads during the outage (status, code, seconds, stored upload): {answers}")
    s.expect(all(a[0] == 503 and a[1] == "queue_unavailable" for a in answers), "uploads answer 503 queue_unavailable")
    # redis-py 8 spends ~6 s retrying a refused connection; after one such failure a web process answers at once
    # for 5 s (jobs.services.BROKER_RETRY_PAUSE_SECONDS), so most requests during an outage are fast
    slow = [a for a in answers if a[2] >= 3.0]
    s.expect(
        len(slow) <= len(answers) // 2,
        f"{len(answers) - len(slow)} of {len(answers)} outage answers took < 3 s "
        "(one probe per web process per 5 s pays the client's connection retries)",
    )
    st_list, body, secs = s.get(f"/api/v1/projects/{env.slug}/uploads/")
    st_job, _, _ = s.get(f"/api/v1/jobs/{s.jobs()[0]['id']}/")
    s.expect(
        st_list == 200 and st_job == 200 and len(body["results"]) == 9,
        f"reads keep working: upload list {st_list} ({secs:.2f} s, {len(body['results'])} uploads), job {st_job}",
    )
    env.start_redis()
    s.note("redis started again")
    s.expect(s.wait_jobs_terminal(240), "the queued validations were resent by the reaper and every job finished")
    stages = env.sql("select stage, count(*) from runs_upload group by stage order by stage")
    s.note(f"upload stages: {stages}")
    env.stop_workers()
    s.consistent()


def disk_full(s: Scenario) -> None:
    """Fill the (tmpfs) artifact store, then upload: 507 storage_full, no row, no partial file; earlier uploads
    intact; after space is freed the same upload is accepted."""
    env = s.env
    before = synth_log(10, seed=400)
    status, *_ = s.upload(before, "before.jsonl.gz")
    s.expect(status == 201, f"upload before the disk fills: {status}")
    import os
    import shutil

    free = shutil.disk_usage(env.artifacts).free
    filler = env.artifacts / "filler.bin"
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - 256 * 1024))
    s.note(f"filled the store: {shutil.disk_usage(env.artifacts).free // 1024} KiB free")
    big = synth_log(200, seed=401, gzip_it=False)
    status, body, _ = s.upload(big, "big.jsonl")
    s.expect(
        status == 507 and (body or {}).get("error", {}).get("code") == "storage_full",
        f"upload of {len(big) // 1024} KiB refused: {status} {(body or {}).get('error', {}).get('code')}",
    )
    leftovers = list((env.artifacts / "incoming").glob("*")) if (env.artifacts / "incoming").exists() else []
    s.expect(not leftovers, f"no partial file left in incoming/ ({len(leftovers)})")
    s.expect(int(env.sql("select count(*) from runs_upload")[0][0]) == 1, "no upload row recorded for it")
    os.unlink(filler)
    status, *_ = s.upload(big, "big.jsonl")
    s.expect(status == 201, f"after space is freed the same upload is accepted: {status}")
    env.start_worker("df", concurrency=1)
    s.expect(s.wait_jobs_terminal(180), "its jobs finished")
    env.stop_workers()
    s.consistent()


def concurrent_duplicate(s: Scenario) -> None:
    """The same bytes submitted by 6 clients at once, through different daphne processes, ten times: one upload
    (one 201, the rest 200 naming it), one file, one validation job each time."""
    env = s.env
    ok = True
    for round_ in range(10):
        data = synth_log(15, seed=500 + round_)
        gate = threading.Barrier(6)

        def send(k):
            gate.wait()
            return s.upload(data, f"dup-{round_}.jsonl.gz", base=env.base_urls[k % len(env.base_urls)])

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(send, range(6)))
        statuses = sorted(a[0] for a in answers)
        ids = {a[1]["id"] for a in answers if a[1] and "id" in a[1]}
        ok &= statuses == [200] * 5 + [201] and len(ids) == 1
        if round_ == 0 or not ok:
            s.note(f"round {round_}: statuses {statuses}, ids {ids}")
    originals = int(env.sql("select count(*) from runs_upload where duplicate_of_id is null")[0][0])
    dups = int(env.sql("select count(*) from runs_upload where duplicate_of_id is not null")[0][0])
    jobs = int(env.sql("select count(*) from jobs_job where kind='validate_upload'")[0][0])
    s.expect(ok, "every round: exactly one 201, five 200s naming the same upload")
    s.expect(
        originals == 10 and dups == 50 and jobs == 10, f"{originals} originals, {dups} duplicates, {jobs} validations"
    )
    env.start_worker("dup", concurrency=1)
    s.expect(s.wait_jobs_terminal(240), "their jobs finished")
    env.stop_workers()
    s.consistent()


def pipeline(s: Scenario) -> None:
    """Upload through daphne, a real Celery worker over the configured broker runs validation, certification and
    the fidelity audit: every job succeeds (the integration path, for comparing brokers with --broker)"""
    env = s.env
    s.note(f"broker: {env.env.get('CELERY_BROKER_URL') or env.env['REDIS_URL']}")
    env.start_worker("pipe", concurrency=2)
    started = time.monotonic()
    ids = []
    for i in range(3):
        status, body, _ = s.upload(synth_log(60, seed=600 + i), f"pipe-{i}.jsonl.gz")
        s.expect(status == 201, f"upload {i}: {status}")
        ids.append(body["id"])
    s.expect(s.wait_jobs_terminal(300, reap=False), "every job finished without the reaper's help")
    s.note(f"3 uploads validated, certified and audited in {time.monotonic() - started:.1f} s")
    jobs = s.jobs()
    s.expect(
        len(jobs) == 9 and all(j["state"] == "succeeded" and j["attempts"] == 1 for j in jobs),
        f"{len(jobs)} jobs, states {sorted({j['state'] for j in jobs})}, attempts {sorted({j['attempts'] for j in jobs})}",
    )
    env.stop_workers()
    s.consistent()


SCENARIOS = {
    "pipeline": pipeline,
    "worker_killed": worker_killed,
    "postgres_restart": postgres_restart,
    "redis_down": redis_down,
    "disk_full": disk_full,
    "concurrent_duplicate": concurrent_duplicate,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--web-processes", type=int, default=2)
    parser.add_argument(
        "--broker",
        help="CELERY_BROKER_URL for the web tier and workers (default: the private Redis), "
        "e.g. amqp://guest:guest@127.0.0.1:5672/ap_reliability",
    )
    parser.add_argument(
        "--worktree",
        action="store_true",
        help="run the working tree as it is (default: the committed code, git HEAD, exported)",
    )
    args = parser.parse_args()
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    verdicts = {}
    for i, name in enumerate(args.scenarios or SCENARIOS):
        print(f"== {name}: {SCENARIOS[name].__doc__.split(':')[0].strip()}", flush=True)
        env = PortalEnv(
            pg_port=55432 + i,
            redis_port=56379 + i,
            web_port=58001 + 10 * i,
            heartbeat_timeout=HEARTBEAT,
            artifact_tmpfs_mb=64,
            keep=args.keep,
            snapshot=not args.worktree,
            extra_env={"CELERY_BROKER_URL": args.broker} if args.broker else None,
        )
        scenario = Scenario(env)
        started = time.monotonic()
        try:
            env.setup()
            env.start_web(args.web_processes)
            SCENARIOS[name](scenario)
        except Exception as exc:  # noqa: BLE001 - a scenario that crashes is a failed scenario, with the reason
            scenario.failures.append(f"scenario crashed: {type(exc).__name__}: {exc}")
            print(f"    FAIL crashed: {type(exc).__name__}: {exc}", flush=True)
        finally:
            env.teardown()
        verdicts[name] = "PASS" if not scenario.failures else "FAIL"
        print(
            f"-- {name}: {verdicts[name]} ({time.monotonic() - started:.0f} s)"
            + "".join(f"\n     {f}" for f in scenario.failures),
            flush=True,
        )
    print("\nverdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts.items()))
    return 0 if all(v == "PASS" for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
