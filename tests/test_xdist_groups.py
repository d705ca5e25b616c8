"""`scripts/test` runs the suite on two xdist workers with ``--dist loadgroup``: a module marked
``xdist_group`` must run on one worker, or its module-scoped fixture (a whole contract calibration, a browser
world) is built once per worker. pytest 9.2 with pytest-xdist 3.8 silently dropped the grouping (xdist renames
``item._nodeid``, which pytest 9.2 no longer reads), which doubled the calibration's cost in every CI run; this
test fails if a version bump drops it again."""

from __future__ import annotations

import subprocess
import sys

MODULE = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("one_worker")


@pytest.mark.parametrize("i", range(6))
def test_where(i):
    with open(os.environ["WHERE_FILE"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_a_grouped_module_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the project's: no Django, no conftest
    where = tmp_path / "where.txt"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(tmp_path / "pytest.ini"),
            str(tmp_path / "test_grouped.py"),
        ],
        cwd=tmp_path,
        env={"WHERE_FILE": str(where), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    workers = where.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers
