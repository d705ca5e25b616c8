"""The offline verifier installs on its own (verifier/pyproject.toml: `pip install ./verifier`, no portal, no Django):
its wheel holds workers/verify and nothing of the portal, and the code it ships imports only the standard library,
cryptography and rfc8785."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {"cryptography", "rfc8785", "workers"}


def test_the_wheel_holds_the_verifier_and_nothing_of_the_portal(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT / "verifier"),
        ],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("audit_portal_verify-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    code = [n for n in names if n.endswith(".py")]
    assert "workers/verify/__main__.py" in code and "workers/verify/bundle.py" in code
    assert not [n for n in code if n.startswith(("audit_portal/", "workers/certify", "pipelines/"))]
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "audit-portal-verify = workers.verify.__main__:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_the_shipped_code_imports_only_the_standard_library_and_its_two_dependencies():
    foreign = []
    for path in sorted((ROOT / "workers" / "verify").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top not in ALLOWED and top not in sys.stdlib_module_names:
                    foreign.append(f"{path.name}: {name}")
                if top == "workers" and not name.startswith("workers.verify"):
                    foreign.append(f"{path.name}: {name} (outside workers.verify)")
    assert not foreign, foreign
