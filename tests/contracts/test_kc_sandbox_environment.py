"""The candidate's process gets an allowlisted environment: a submitted kernel that reads ``os.environ`` or
``/proc/self/environ`` finds no database URL, secret key or other credential of the worker — with the forkserver
(default) and with plain spawn — while what torch and the GPU stack read (PATH, KC_*, CUDA_*, …) is still there and
the worker's own environment is unchanged. Seen before the allowlist: the kernel read all three canaries."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KERNEL = '''
import os
seen = sorted(k for k in ("DATABASE_URL", "AUDIT_SECRET_KEY", "CANARY_TOKEN") if k in os.environ)
raw = open("/proc/self/environ", "rb").read()
leaked = sorted(s for s in ("canary-db-secret", "canary-secret-key", "canary-token") if s.encode() in raw)
raise RuntimeError("REPORT " + repr({"env": seen, "proc": leaked, "path": "PATH" in os.environ,
                                     "kc": os.environ.get("KC_PROBE")}))
'''

DRIVER = '''
import json, os
from workers.contracts.sandbox import run_in_sandbox
out = run_in_sandbox(os.environ["KERNEL_FILE"] + ":f", [])
print(json.dumps({"kind": out.get("kind"), "message": out["error"]["message"],
                  "parent_keeps": os.environ.get("DATABASE_URL")}))
'''


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_submitted_code_sees_no_worker_credentials(tmp_path, method):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(KERNEL)
    env = {**os.environ, "DATABASE_URL": "postgres://canary-db-secret@db/portal", "AUDIT_SECRET_KEY": "canary-secret-key",
           "CANARY_TOKEN": "canary-token", "KC_PROBE": "kept", "KC_START_METHOD": method, "KERNEL_FILE": str(kernel)}
    done = subprocess.run([sys.executable, "-c", DRIVER], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["kind"] == "load_error" and "REPORT" in out["message"], out
    report = eval(out["message"].split("REPORT ", 1)[1])  # noqa: S307 - the repr our kernel above wrote
    assert report == {"env": [], "proc": [], "path": True, "kc": "kept"}
    assert out["parent_keeps"] == "postgres://canary-db-secret@db/portal"  # the worker's own environment is intact
