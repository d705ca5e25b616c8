"""A private, production-shaped portal on loopback for the load and fault scripts (bench/load.py, bench/faults.py).

Everything is private to one run and torn down at the end: a PostgreSQL 15 cluster (initdb into a temp dir, its
own port; never the machine's shared one), a redis-server on its own port, an artifact store (optionally a small
tmpfs so the disk can really fill up), web processes (scripts/web: uvicorn; several processes, one port each,
the client spreads requests over them) and Celery workers. Ports default to 55432 (PostgreSQL), 56379 (Redis) and
58001+ (web).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
BIN = ROOT / ".venv" / "bin"
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def children(pid: int) -> list[int]:
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    return [int(x) for x in out.split()]


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


class PortalEnv:
    def __init__(
        self,
        *,
        pg_port=55432,
        redis_port=56379,
        web_port=58001,
        heartbeat_timeout=600,
        artifact_tmpfs_mb: int | None = None,
        keep: bool = False,
        extra_env: dict | None = None,
        snapshot: bool = False,
    ):
        self.pg_port, self.redis_port, self.web_port = pg_port, redis_port, web_port
        self.dir = Path(tempfile.mkdtemp(prefix="ap-bench-"))
        os.chmod(self.dir, 0o755)
        # snapshot: run the committed code (git HEAD), not a working tree other people are editing right now
        self.code = export_head(self.dir / "code") if snapshot else ROOT
        self.keep = keep
        self.pg_data = self.dir / "pg"
        self.sock_dir = self.dir / "pgsock"
        self.artifacts = self.dir / "artifacts"
        self.artifact_tmpfs_mb = artifact_tmpfs_mb
        self.var = self.dir / "var"
        self.logs = self.dir / "log"
        for d in (self.artifacts, self.var, self.logs, self.sock_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:{pg_port}/audit_portal",
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "ARTIFACT_ROOT": str(self.artifacts),
            "AUDIT_VAR_DIR": str(self.var),
            "JOB_HEARTBEAT_TIMEOUT_SECONDS": str(heartbeat_timeout),
            "UPLOAD_THROTTLE_RATE": "100000/min",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(self.code),
            **(extra_env or {}),
        }
        if "CELERY_BROKER_URL" not in (extra_env or {}):
            self.env.pop("CELERY_BROKER_URL", None)  # the broker is the private Redis unless asked otherwise
        self.redis: subprocess.Popen | None = None
        self.webs: list[subprocess.Popen] = []
        self.workers: dict[str, subprocess.Popen] = {}
        self.token: str | None = None
        self.slug = "bench"

    # ------------------------------------------------------------------------------------------ services
    def _as_postgres(self, *cmd) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", "postgres", "--", *map(str, cmd)], capture_output=True, text=True)

    def start_postgres(self) -> None:
        if not self.pg_data.exists():
            self.pg_data.mkdir()
            shutil.chown(self.pg_data, "postgres", "postgres")
            shutil.chown(self.sock_dir, "postgres", "postgres")
            shutil.chown(self.logs, "postgres", "postgres")
            r = self._as_postgres(PG_BIN / "initdb", "-D", self.pg_data, "-A", "trust", "-U", "postgres", "--no-sync")
            if r.returncode:
                raise RuntimeError(f"initdb failed: {r.stderr}")
        self._pg_ctl("start", "-w", "-t", "60")

    def _pg_ctl(self, action: str, *args) -> None:
        opts = f"-p {self.pg_port} -k {self.sock_dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        r = self._as_postgres(
            PG_BIN / "pg_ctl", "-D", self.pg_data, "-l", self.logs / "postgres.log", "-o", opts, action, *args
        )
        if r.returncode:
            raise RuntimeError(f"pg_ctl {action} failed: {r.stdout} {r.stderr}")

    def stop_postgres(self, mode: str = "fast") -> None:
        self._pg_ctl("stop", "-m", mode, "-w")

    def restart_postgres(self, mode: str = "fast") -> None:
        self._pg_ctl("restart", "-m", mode, "-w", "-t", "60")

    def start_redis(self) -> None:
        self.redis = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=open(self.logs / "redis.log", "ab"),
            stderr=subprocess.STDOUT,
        )
        import redis

        client = redis.Redis(port=self.redis_port)
        if not wait_until(lambda: _pings(client), 10):
            raise RuntimeError("private redis did not start")

    def stop_redis(self) -> None:
        if self.redis and self.redis.poll() is None:
            self.redis.terminate()
            self.redis.wait(10)
        self.redis = None

    def mount_artifacts(self) -> None:
        if self.artifact_tmpfs_mb:
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.artifact_tmpfs_mb}m", "tmpfs", str(self.artifacts)],
                check=True,
            )

    def manage(self, *args, check=True, timeout=300) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [PY, "manage.py", *args], cwd=self.code, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and r.returncode:
            raise RuntimeError(
                f"manage.py {' '.join(args)} failed ({r.returncode}): {r.stdout[-2000:]} {r.stderr[-2000:]}"
            )
        return r

    def setup(self) -> "PortalEnv":
        self.mount_artifacts()
        self.start_postgres()
        r = subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.pg_port),
                "-U",
                "postgres",
                "-qc",
                "create database audit_portal",
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode and "already exists" not in r.stderr:
            raise RuntimeError(r.stderr)
        self.start_redis()
        self.manage("migrate", "--noinput", "-v0")
        self.token = self.manage("shell", "-c", _SEED).stdout.strip().splitlines()[-1]
        return self

    def start_web(self, processes: int = 1) -> list[str]:
        for i in range(processes):
            port = self.web_port + len(self.webs)
            # the production web server, started the way scripts/up starts it (scripts/web: uvicorn)
            proc = subprocess.Popen(
                [str(self.code / "scripts" / "web"), "127.0.0.1", str(port)],
                cwd=self.code,
                env={**self.env, "PATH": f"{BIN}:{self.env.get('PATH', '')}"},
                stdout=open(self.logs / f"web-{port}.log", "ab"),
                stderr=subprocess.STDOUT,
            )
            self.webs.append(proc)
            if not wait_until(lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"), 60):
                raise RuntimeError(f"the web server on {port} did not answer; see {self.logs}")
        return self.base_urls

    @property
    def base_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.web_port + i}" for i in range(len(self.webs))]

    def stop_web(self) -> None:
        for proc in self.webs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.webs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.webs = []

    def start_worker(
        self, name: str = "w1", queues: str = "cpu", concurrency: int = 1, beat: bool = False, env: dict | None = None
    ) -> subprocess.Popen:
        cmd = [
            str(BIN / "celery"),
            "-A",
            "audit_portal",
            "worker",
            "-Q",
            queues,
            "-P",
            "prefork",
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            "-l",
            "info",
            "--without-gossip",
            "--without-mingle",
        ]
        if beat:
            cmd += ["-B", "-s", str(self.var / f"beat-{name}")]
        return self._spawn_worker(name, cmd, env)

    def start_shipped_worker(self, name: str = "general", role: str = "general", env: dict | None = None):
        """A worker role started by the shipped command, as scripts/up starts it (scripts/worker: its queues, pool,
        concurrency and thread settings; DATABASE_URL is set, so a prefork pool of WORKER_CONCURRENCY, default 2)."""
        cmd = [str(self.code / "scripts" / "worker"), role, "-l", "info", "--without-gossip", "--without-mingle"]
        return self._spawn_worker(name, cmd, {"PATH": f"{BIN}:{self.env.get('PATH', '')}", **(env or {})})

    def _spawn_worker(self, name: str, cmd: list[str], env: dict | None) -> subprocess.Popen:
        proc = subprocess.Popen(
            cmd,
            cwd=self.code,
            env={**self.env, **(env or {})},
            stdout=open(self.logs / f"worker-{name}.log", "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.workers[name] = proc
        log = self.logs / f"worker-{name}.log"
        wait_until(lambda: log.exists() and b"ready." in log.read_bytes(), 90)
        return proc

    def kill_worker(self, name: str, *, children_only: bool = False) -> list[int]:
        proc = self.workers[name]
        pids = children(proc.pid)
        targets = pids if children_only else [proc.pid, *pids]
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not children_only:
            proc.wait(10)
            del self.workers[name]
        return targets

    def stop_workers(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.workers.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.workers = {}

    # -------------------------------------------------------------------------------------------- probes
    def sql(self, query: str) -> list[list[str]]:
        r = subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.pg_port),
                "-U",
                "postgres",
                "-d",
                "audit_portal",
                "-AtF",
                "\t",
                "-c",
                query,
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            raise RuntimeError(r.stderr)
        return [line.split("\t") for line in r.stdout.splitlines() if line]

    def check_consistency(self, grace: float = 0) -> dict:
        r = self.manage("check_consistency", "--json", "--grace", str(grace), check=False)
        try:
            return json.loads(r.stdout)
        except json.JSONDecodeError:
            return {"ok": False, "problems": [f"check_consistency did not run: {r.stderr[-1500:]}"], "warnings": []}

    def teardown(self) -> None:
        self.stop_web()
        self.stop_workers()
        self.stop_redis()
        try:
            self.stop_postgres("immediate")
        except RuntimeError:
            pass
        if self.artifact_tmpfs_mb:
            subprocess.run(["umount", "-l", str(self.artifacts)], check=False)
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print(f"kept {self.dir}", file=sys.stderr)

    def __enter__(self):
        return self.setup()

    def __exit__(self, *exc):
        self.teardown()


def export_head(target: Path) -> Path:
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - any failure to reach the workers means they are not up yet
        return False


def _http_ok(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except Exception:  # noqa: BLE001 - any failure to reach the workers means they are not up yet
        return False


_SEED = """
from django.contrib.auth import get_user_model
from audit_portal.accounts.services import create_project, issue_api_key
owner = get_user_model().objects.create_user("bench", password="bench-password")
project = create_project(name="bench", owner=owner)
print(issue_api_key(project=project, name="bench", scopes=["read", "submit"], created_by=owner).token)
"""


def synth_log(
    trajectories: int, seed: int, *, gzip_it: bool = True, response_len=(16, 192), run_id: str = "demo-run"
) -> bytes:
    import gzip

    import orjson

    from workers.fcr.synth import SynthConfig, iter_run

    data = b"".join(
        orjson.dumps(r) + b"\n"
        for r in iter_run(SynthConfig(trajectories=trajectories, seed=seed, response_len=response_len, run_id=run_id))
    )
    return gzip.compress(data, compresslevel=1) if gzip_it else data


def multipart(data: bytes, name: str) -> tuple[bytes, str]:
    boundary = f"----apbench{time.monotonic_ns()}"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def request(
    method: str, url: str, token: str, body: bytes | None = None, content_type: str | None = None, timeout: float = 60
) -> tuple[int, dict | None, float]:
    """One HTTP request on a fresh connection: (status, JSON body or None, seconds). Status 0: no response."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    headers = {"Authorization": f"Bearer {token}"}
    if content_type:
        headers["Content-Type"] = content_type
    started = time.perf_counter()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        status = resp.status
    except (OSError, http.client.HTTPException):
        return 0, None, time.perf_counter() - started
    finally:
        conn.close()
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = {"raw": raw[:300].decode("utf-8", "replace")}
    return status, data, time.perf_counter() - started
