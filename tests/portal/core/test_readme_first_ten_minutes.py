"""README.md's "Your first ten minutes" block, run with bash as a reader pastes it, against a live portal and the
worker roles as they ship (scripts/worker general and kernels, tests/portal/shipped_workers.py). Only what a reader
fills in changes: the key (made the way the other tests make one), the server's address (the live server's port in
place of scripts/up's 8000) and, for isolation, the folder it runs in (links to the checkout's .venv and workers)
and the home the verifier pins its keys under. The block must print the run's verdict and its sentence, the
bundle VERIFIED, and a PASS for each of the two contracts.

Slow (a synthetic run through validation, certification and the fidelity audit, then two sandboxed contracts); the
block's own --trajectories 32 keeps the run small."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from audit_portal.accounts.services import create_project, issue_api_key

from ..shipped_workers import shipped_workers

ROOT = Path(__file__).resolve().parents[3]
VERDICTS = ("certified", "over_budget", "vacuous", "data_errors", "not_verifiable")


def readme_block() -> str:
    """The bash block under the heading "Your first ten minutes", as it stands in README.md."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Your first ten minutes", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```bash\n(.*?)```", section, re.S)
    assert found, "README.md's 'Your first ten minutes' section has no bash block"
    return found.group(1)


def test_the_block_parses_as_bash():
    """Cheap guard, no server: the block as written is valid bash and still has the lines the slow test fills in."""
    block = readme_block()
    assert re.search(r"^TOKEN=ap_\S*", block, re.M) and "http://127.0.0.1:8000" in block
    assert subprocess.run(["bash", "-n"], input=block, text=True, capture_output=True).returncode == 0


@pytest.mark.django_db(transaction=True)  # the worker processes read what the test and the live server commit
@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("jq"), reason="the block needs jq (apt-get install jq)")
def test_the_block_works_when_pasted(settings, tmp_path, live_server, owner):
    call_command("load_contracts", "--no-calibrate", stdout=io.StringIO())
    demo = create_project(name="Demo", owner=owner, slug="demo")
    assert demo.slug == "demo"  # the block names the project demo, as scripts/up seeds it
    token = issue_api_key(project=demo, name="readme", scopes=["read", "submit"], created_by=owner).token
    block = re.sub(r"^TOKEN=ap_\S*", f"TOKEN={token}", readme_block(), count=1, flags=re.M)
    block = block.replace("http://127.0.0.1:8000", live_server.url)
    work = tmp_path / "reader"
    work.mkdir()
    for name in (".venv", "workers"):  # what the block calls from the checkout
        (work / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDG_"))}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"))
    with shipped_workers(settings, tmp_path):
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-x"],  # stop at the first step that fails, showing which
            input="PS4='+ [$SECONDS s] '\n" + block,  # the trace says when each step ran (root ignores PS4 from env)
            cwd=work,
            env=env,
            text=True,
            capture_output=True,
            timeout=540,
        )
    shown = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-6000:]}"
    assert done.returncode == 0, shown
    out = done.stdout.splitlines()
    verdict_at = next(i for i, line in enumerate(out) if line.strip('"') in VERDICTS)  # step 3: the verdict ...
    assert len(out[verdict_at + 1].strip('"')) > 20, shown  # ... and its sentence
    assert "VERIFIED" in done.stdout, shown  # step 4
    kernels = json.loads(next(line for line in out if line.startswith("[{")))  # step 5
    assert sorted(k["contract_id"].split("/")[0] for k in kernels) == ["C-EXC-01", "C-ORD-02"], shown
    assert {k["verdict"] for k in kernels} == {"PASS"}, shown
    assert (work / "runs.csv").read_text().startswith("id,"), shown  # step 6
