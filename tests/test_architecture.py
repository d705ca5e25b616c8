"""Dependencies point one way (docs/architecture.md): the import-linter contracts in ``.importlinter`` hold, a
deliberately added violation of each kind breaks them, and the web process really loads no torch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"
HEAVY = ("torch", "numba", "tokenizers", "transformers")


def lint(cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd), "COLUMNS": "200"}  # one report line per contract
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(cwd / ".importlinter")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_import_contracts_hold():
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert " 0 broken" in out.stdout and "BROKEN" not in out.stdout


@pytest.fixture
def tree_copy(tmp_path) -> Path:
    """The packages the contracts read, copied so violations can be added without touching the checkout."""
    for name in ("pipelines", "audit_portal", "workers", "lint"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


# (file added to the copy, its source, the contracts it must break and no others, words the report must contain)
VIOLATIONS = [
    (
        "audit_portal/core/uses_torch.py",
        "def f():\n    import torch\n",
        ["The web process loads no torch"],
        "audit_portal.core.uses_torch -> torch",
    ),
    (
        "workers/fcr/reads_jobs.py",
        "from audit_portal.jobs import models\n",
        ["Workflows (Celery tasks) above the portal above the engines", "Engines import no Django"],
        "workers.fcr.reads_jobs -> audit_portal.jobs.models",
    ),
    (
        "audit_portal/runs/enqueues_directly.py",
        "def f():\n    from pipelines.uploads import validate_upload\n",
        ["Workflows (Celery tasks) above the portal above the engines"],  # the portal sends tasks by name only
        "audit_portal.runs.enqueues_directly -> pipelines.uploads",
    ),
    (
        "audit_portal/jobs/reaches_up.py",
        "from audit_portal.kernels import models\n",
        ["Portal apps", "No import cycles"],  # kernels imports jobs: reaching up also closes a loop
        "audit_portal.jobs.reaches_up -> audit_portal.kernels.models",
    ),
    (
        "audit_portal/runs/private.py",
        "from workers.fcr.reader import _Inflater\n",
        ["private names"],
        "imports the private name _Inflater from workers.fcr.reader",
    ),
    (
        "audit_portal/core/loop_a.py",
        "from audit_portal.core import loop_b\n",
        ["No import cycles"],
        "No cycles are allowed in audit_portal.core",
    ),
]


@pytest.mark.parametrize("path,source,contracts,words", VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_a_deliberately_added_violation_breaks_its_contract(tree_copy, path, source, contracts, words):
    (tree_copy / path).write_text(source)
    if path.endswith("loop_a.py"):
        (tree_copy / "audit_portal/core/loop_b.py").write_text("from audit_portal.core import loop_a\n")
    out = lint(tree_copy)
    assert out.returncode != 0, out.stdout[-3000:]
    broken = [line for line in out.stdout.splitlines() if " BROKEN" in line]
    assert len(broken) == len(contracts), broken
    assert all(any(c in line for line in broken) for c in contracts), broken
    assert words in " ".join(out.stdout.split()), out.stdout[-3000:]


def test_the_web_process_loads_no_torch():
    """Django set up, every URLconf (and so every view, API and page module) and the ASGI application imported in a
    fresh interpreter: none of the heavy engine libraries is in sys.modules."""
    code = (
        "import sys, django; django.setup(); "
        "import audit_portal.urls, audit_portal.api_urls, audit_portal.routing; "
        "from django.urls import get_resolver; get_resolver().url_patterns; "
        "import audit_portal.asgi; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "audit_portal.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
