"""Every Celery task name is declared once, in ``audit_portal.task_names`` (docs/architecture.md): the worker app
registers each of them, each ends in its function's name, the beat schedule names only registered tasks, and no
other module of the portal or of ``pipelines`` spells a task name as a string."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from django.conf import settings

from audit_portal import task_names
from audit_portal.celery import app

ROOT = Path(__file__).resolve().parents[3]


def worker_tasks() -> dict:
    """The tasks the worker command registers: ``celery -A audit_portal worker`` imports the include list."""
    for module in settings.CELERY_INCLUDE:
        importlib.import_module(module)
    return {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}


def test_the_names_keep_their_wire_form():
    # stored on job rows and in queued messages before the tasks moved to pipelines/: changing the prefix would
    # strand them (the reaper resends Job.task_name)
    assert task_names.PREFIX == "workers.tasks."
    assert len(task_names.ALL) == len(set(task_names.ALL)) >= 16
    assert all(name.startswith(task_names.PREFIX) for name in task_names.ALL)


def test_every_declared_name_is_a_task_of_the_worker_and_the_reverse():
    registered = worker_tasks()
    assert set(task_names.ALL) == set(registered), set(task_names.ALL) ^ set(registered)
    for name, task in registered.items():
        function = task.run
        assert name == task_names.PREFIX + function.__name__, (name, function)
        assert function.__module__.startswith("pipelines."), (name, function.__module__)


def test_the_beat_schedule_names_registered_tasks():
    registered = worker_tasks()
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert scheduled and scheduled <= set(registered), scheduled - set(registered)


def string_task_names(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(root)}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(task_names.PREFIX)
        and node.value != task_names.PREFIX
    ]


def test_no_module_spells_a_task_name_outside_the_declarations():
    declarations = ROOT / "audit_portal" / "task_names.py"
    found = [
        problem
        for folder in ("audit_portal", "pipelines")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != declarations and "migrations" not in path.parts
        for problem in string_task_names(path)
    ]
    assert found == []


def test_the_scan_sees_a_spelled_name(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('send_task("workers.tasks.validate_upload", [1])\nPREFIX = "workers.tasks."\n')
    assert [p.split(": ", 1)[1] for p in string_task_names(probe, tmp_path)] == ["'workers.tasks.validate_upload'"]
