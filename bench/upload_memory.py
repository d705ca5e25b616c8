"""How much the web process grows while it receives one large upload, per ASGI server.

Starts a private portal web process (embedded SQLite and filesystem broker in a temporary folder; no worker, no
shared database or Redis touched) exactly as scripts/up does (``scripts/web``, uvicorn) or with daphne (the server
scripts/up used before), then streams one generated upload of ``--mb`` MiB through a plain socket (the body is
produced as it is sent: the client never holds it) and samples the server's resident set size every 50 ms.

    .venv/bin/python bench/upload_memory.py --server uvicorn --mb 1024
    .venv/bin/python bench/upload_memory.py --server daphne --mb 256 --max-rss-mb 4000
    .venv/bin/python bench/upload_memory.py --server uvicorn --mb 1024 --shape one-line   # refused: line too long
    .venv/bin/python bench/upload_memory.py --server uvicorn --mb 500 --concurrent 10     # ten at once

``--shape valid``: fcr/1 JSONL records (a generated block repeated; the synchronous pre-flight sees valid records and
the upload is stored, 201, or 200 when the same bytes were stored before). ``--shape one-line``: a single line as long
as the whole upload, which the portal must refuse (JSON 400, ``line_too_long``). ``--max-rss-mb``: the server is
killed once it passes this much (the measurement then says so), so a server that buffers the body cannot take the
machine down. Prints one JSON line per run: HTTP status, error code, seconds, RSS before / peak / growth in MiB.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
MiB = 1024 * 1024

_SEED = """
from django.contrib.auth import get_user_model
from audit_portal.accounts.services import create_project, issue_api_key
owner = get_user_model().objects.create_user("bench", password="bench-password")
project = create_project(name="bench", owner=owner, slug="bench")
print(issue_api_key(project=project, name="bench", scopes=["read", "submit"], created_by=owner).token)
"""


def rss_mb(pid: int) -> float:
    """Resident set size of the process and its children, MiB (0 once it is gone)."""
    total = 0
    pids = [pid]
    try:
        pids += [
            int(x) for x in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        ]
    except FileNotFoundError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def valid_block() -> bytes:
    import orjson

    from workers.fcr.synth import SynthConfig, iter_run

    return b"".join(orjson.dumps(r) + b"\n" for r in iter_run(SynthConfig(trajectories=64, seed=7)))


def body_pieces(shape: str, size: int, boundary: str, salt: str = ""):
    """The multipart body in 1 MiB pieces, and its exact length: produced while it is sent."""
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def payload():
        if shape == "one-line":
            start = b'{"call_id": "' + b"x" * (MiB - 14)
            yield start
            sent, filler = len(start), b"x" * MiB
            while sent < size:
                piece = filler[: size - sent]
                sent += len(piece)
                yield piece
            return
        block, sent, rep = valid_block(), 0, 0
        while sent < size:
            # fresh call ids per repetition keep the records distinct; the last piece ends on a whole record padded
            # with spaces (valid JSON) to the exact size
            piece = block.replace(b'"call_id":"', f'"call_id":"{salt}r{rep}-'.encode())
            if len(piece) > size - sent:
                piece = piece[: size - sent]
                end = piece.rfind(b"\n", 0, len(piece) - 1) + 1
                piece = piece[:end] + b" " * (len(piece) - end - 1) + b"\n"
            rep += 1
            sent += len(piece)
            yield piece

    return len(head) + size + len(tail), head, payload(), tail


def upload(
    port: int, token: str, shape: str, size: int, timeout: float, project: str = "bench", salt: str = ""
) -> tuple[int, dict | str, float, float]:
    """POST the streamed body on a raw socket; (status, JSON body or text, seconds to send, seconds to answer)."""
    boundary = f"----apmem{time.monotonic_ns()}"
    length, head, pieces, tail = body_pieces(shape, size, boundary, salt)
    start = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    request = (
        f"POST /api/v1/projects/{project}/uploads/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
    ).encode()
    try:
        sock.sendall(request + head)
        for piece in pieces:
            sock.sendall(piece)
        sock.sendall(tail)
    except OSError:  # the server answered early and closed (e.g. a refusal), or died
        pass
    sent_s = time.monotonic() - start
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except OSError:
        pass
    sock.close()
    answered_s = time.monotonic() - start
    if not data:
        return 0, "no answer", sent_s, answered_s
    status_line, _, rest = data.partition(b"\r\n")
    status = int(status_line.split()[1])
    body = rest.partition(b"\r\n\r\n")[2]
    try:
        return status, json.loads(body), sent_s, answered_s
    except ValueError:
        return status, body[:200].decode(errors="replace"), sent_s, answered_s


def start_server(server: str, port: int, env: dict, log: Path) -> subprocess.Popen:
    if server == "uvicorn":
        cmd = [str(ROOT / "scripts" / "web"), "127.0.0.1", str(port)]
    else:
        cmd = [
            str(ROOT / ".venv" / "bin" / "daphne"),
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "audit_portal.asgi:application",
        ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{server} exited; see {log}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).status == 200:
                return proc
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{server} did not answer on {port}; see {log}")


@contextlib.contextmanager
def private_web(server: str, port: int, keep: bool = False):
    """A migrated embedded portal in a temporary folder with user/project/key "bench", its web server started;
    yields (server process, API token, environment). Everything is removed afterwards unless ``keep``."""
    tmp = Path(tempfile.mkdtemp(prefix="ap-upmem-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(
        AUDIT_VAR_DIR=str(tmp / "var"),
        ARTIFACT_ROOT=str(tmp / "artifacts"),
        AUDIT_INSTANCE="bench_upmem",
        UPLOAD_THROTTLE_RATE="100000/min",
        LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
        TMPDIR=str(tmp),
        DJANGO_SETTINGS_MODULE="audit_portal.settings",
    )
    (tmp / "var").mkdir()
    proc = None
    try:
        subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
        token = (
            subprocess.run(
                [PY, "manage.py", "shell", "-c", _SEED], cwd=ROOT, env=env, check=True, capture_output=True, text=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        proc = start_server(server, port, env, tmp / "web.log")
        yield proc, token, env
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def measured_upload(
    proc,
    port: int,
    token: str,
    shape: str,
    size_mb: int,
    max_rss_mb: float,
    project: str = "bench",
    concurrent: int = 1,
) -> dict:
    """``concurrent`` uploads at once (different bytes each) while the server's RSS is sampled every 50 ms; the
    server is killed past ``max_rss_mb``. Status, code and times are the slowest upload's; ``statuses`` all."""
    before = rss_mb(proc.pid)
    peak, killed, stop = [before], [False], threading.Event()

    def sample():
        while not stop.is_set():
            now = rss_mb(proc.pid)
            peak[0] = max(peak[0], now)
            if now > max_rss_mb and proc.poll() is None:
                killed[0] = True
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    answers = [None] * concurrent

    def one(i):
        answers[i] = upload(port, token, shape, size_mb * MiB, 1800, project, salt=f"c{i}-{time.time_ns()}-")

    try:
        workers = [threading.Thread(target=one, args=(i,)) for i in range(concurrent)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        stop.set()
        sampler.join()
    status, body, sent_s, answered_s = max(answers, key=lambda a: a[3])
    code = body.get("error", {}).get("code") if isinstance(body, dict) else None
    extra = {"concurrent": concurrent, "statuses": sorted(a[0] for a in answers)} if concurrent > 1 else {}
    return {
        "shape": shape,
        "mb": size_mb,
        **extra,
        "status": status,
        "code": code or (body.get("stage") if isinstance(body, dict) else body),
        "send_s": round(sent_s, 1),
        "answer_s": round(answered_s, 1),
        "rss_before_mb": round(before),
        "rss_peak_mb": round(peak[0]),
        "growth_mb": round(peak[0] - before),
        "killed_at_cap": killed[0],
    }


def measure(
    server: str, shapes: list[str], size_mb: int, port: int, max_rss_mb: float, keep: bool, concurrent: int = 1
) -> list[dict]:
    results = []
    with private_web(server, port, keep) as (proc, token, _env):
        upload(port, token, "valid", MiB, 120)  # warm-up: the upload code path imported and run once
        for shape in shapes:
            time.sleep(1.0)
            results.append(
                {
                    "server": server,
                    **measured_upload(proc, port, token, shape, size_mb, max_rss_mb, concurrent=concurrent),
                }
            )
            print(json.dumps(results[-1]), flush=True)
            if results[-1]["killed_at_cap"]:
                break
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    parser.add_argument("--mb", type=int, default=1024, help="upload size in MiB")
    parser.add_argument("--shape", default="valid", help="valid, one-line, or both comma-separated")
    parser.add_argument("--port", type=int, default=58090)
    parser.add_argument("--max-rss-mb", type=float, default=4000)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, artifacts)")
    parser.add_argument(
        "--running",
        metavar="PID",
        type=int,
        help="measure a server already running (e.g. scripts/up's: var/run/web.pid) on --port, with "
        "--token and --project, instead of starting one (nothing is killed: no --max-rss-mb)",
    )
    parser.add_argument("--token")
    parser.add_argument("--project", default="bench")
    parser.add_argument("--concurrent", type=int, default=1, help="this many uploads at once, each of --mb")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.running:

        class Running:
            pid = args.running

            @staticmethod
            def poll():
                return None

        for shape in args.shape.split(","):
            print(
                json.dumps(
                    {
                        "server": f"running pid {args.running}",
                        **measured_upload(
                            Running, args.port, args.token, shape, args.mb, float("inf"), args.project, args.concurrent
                        ),
                    }
                ),
                flush=True,
            )
        return 0
    measure(args.server, args.shape.split(","), args.mb, args.port, args.max_rss_mb, args.keep, args.concurrent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
