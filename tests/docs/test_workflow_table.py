"""docs/architecture.md's table of workflow steps is one hop from the code: each row names a function and the file
that defines it, and every Celery task in ``pipelines/`` has a row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
HEADING = "## Workflows, step by step"
ROW = re.compile(r"^\|(?P<workflow>[^|]*)\|(?P<step>[^|]*)\|\s*`(?P<function>\w+)`\s*\|\s*`(?P<file>[\w./]+)`\s*\|\s*$")


def table_rows(text: str) -> list[dict]:
    """The rows of the table under HEADING, up to the next heading; a row that is not `function` | `file` is kept
    with function None so that the test reports it."""
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith("|---") or line.startswith("| workflow"):
            continue
        match = ROW.match(line)
        rows.append(match.groupdict() if match else {"line": line, "function": None, "file": None})
    return rows


def defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def row_problems(rows: list[dict], root: Path = ROOT) -> list[str]:
    problems = []
    for row in rows:
        if row["function"] is None:
            problems.append(f"not a `function` | `file` row: {row['line']}")
        elif not (root / row["file"]).is_file():
            problems.append(f"{row['file']} does not exist")
        elif row["function"] not in defined_names(root / row["file"]):
            problems.append(f"{row['file']} defines no {row['function']}")
    return problems


def celery_tasks(folder: Path) -> set[tuple[str, str]]:
    """(file, function) of every function decorated with ``@shared_task(...)`` under folder."""
    found = set()
    for path in folder.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and getattr(d.func, "id", None) == "shared_task" for d in node.decorator_list
            ):
                found.add((str(path.relative_to(ROOT)), node.name))
    return found


def test_every_step_names_a_function_of_the_file_it_cites():
    rows = table_rows(DOC.read_text(encoding="utf-8"))
    assert len(rows) >= 20
    assert row_problems(rows) == []


def test_every_celery_task_is_a_step_of_the_table():
    rows = table_rows(DOC.read_text(encoding="utf-8"))
    tasks = celery_tasks(ROOT / "pipelines")
    assert len(tasks) >= 16
    assert tasks - {(row["file"], row["function"]) for row in rows} == set()


def test_a_row_pointing_nowhere_is_reported(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("def present():\n    def nested():\n        pass\n")
    text = (
        f"{HEADING}\n\n| workflow | step | function | file |\n|---|---|---|---|\n"
        "| w | ok | `present` | `pkg/mod.py` |\n"
        "| | nested only | `nested` | `pkg/mod.py` |\n"
        "| | no file | `present` | `pkg/gone.py` |\n"
        "| | no code mark | present | `pkg/mod.py` |\n\n## Next\n| w | later | `x` | `y.py` |\n"
    )
    problems = row_problems(table_rows(text), tmp_path)
    assert problems == [
        "pkg/mod.py defines no nested",
        "pkg/gone.py does not exist",
        "not a `function` | `file` row: | | no code mark | present | `pkg/mod.py` |",
    ]
