"""Habits CI keeps: every `# noqa` says on its line why the rule does not apply there (ruff itself removes a noqa
that silences nothing: RUF100 in ruff.toml)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("pipelines", "audit_portal", "workers", "tests", "client", "bench", "lint")
BARE_NOQA = re.compile(r"#\s*noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?\s*$")


def test_every_noqa_gives_its_reason():
    bare = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if BARE_NOQA.search(line)
    ]
    assert not bare, "a # noqa without a reason on its line (write '# noqa: CODE - why'):\n" + "\n".join(bare)


def test_the_pattern_tells_a_reason_from_none():
    assert BARE_NOQA.search("import x  # noqa: F401")
    assert BARE_NOQA.search("import x  # noqa")
    assert not BARE_NOQA.search("import x  # noqa: F401 - re-exported")
