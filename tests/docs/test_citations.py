"""Every document the code and the docs cite exists in this repository, down to the section.

A newcomer has only this checkout. Comments, docstrings, templates and messages may point at ``docs/<name>.md``,
``docs/<name>.md#<anchor>`` or ``README.md#<anchor>``; a markdown file may link ``[text](other.md#anchor)`` or
``[text](#anchor)``. Each target must be a file here, and each anchor a heading of that file, with the anchor
GitHub derives from the heading text. Citations of the design material this project was started from
(``spec/<name>.md``, "ARCHITECTURE", bare ``§`` section numbers) are refused: that material is not in the
repository. Section signs of public standards (RFC 6962 §2.1, IEEE 754 §7.5) stay allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED_DIRS = (
    "pipelines",
    "workers",
    "audit_portal",
    "client",
    "scripts",
    "bench",
    "tests",
    "templates",
    "docs",
    "deploy",
    ".ci",
    "static",
)
SCANNED_FILES = ("README.md", "Dockerfile", "docker-compose.yml", "requirements.txt", "pytest.ini")
TEXT_SUFFIXES = {
    ".py",
    ".md",
    ".html",
    ".txt",
    ".yaml",
    ".yml",
    ".sh",
    ".js",
    ".css",
    ".toml",
    ".cfg",
    ".ini",
    ".json",
    ".svg",
    "",
}
SKIP_PARTS = {"__pycache__", "node_modules", ".venv", "test-artifacts", "var", "vendor"}  # vendor: third-party bundles
# Files that must mention the old citation style, and why (each must still contain one, so the list cannot rot).
EXEMPT = {
    "audit_portal/dashboards/templatetags/portal_format.py": "strips 'spec §…' references from messages stored in the database before docs/ existed",
    "tests/portal/core/test_plain_words.py": "feeds such stored messages to that filter",
    "tests/docs/test_citations.py": "this test's own patterns and examples",
}
SELF = "tests/docs/test_citations.py"

CITATION = re.compile(r"(?<![\w./-])((?:docs/[\w./-]+?|README)\.md)(?:#([\w-]+))?")  # anchors: letters, digits, _ and -
MD_LINK = re.compile(r"\]\(([^)\s]*?)\)")
SPEC_DOC = re.compile(r"(?<![\w./-])spec/[\w./-]*\.md")
ARCHITECTURE = re.compile(r"\bARCHITECTURE\b")
SECTION = re.compile(r"§")
STANDARD = re.compile(r"\b(?:RFC ?\d+|IEEE[ -]?\d+|ISO ?\d+)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def github_anchor(text: str) -> str:
    """The anchor GitHub gives a heading: link text kept, code marks and punctuation dropped, lower case, each
    space a hyphen (``## Validator — `workers.fcr` `` → ``validator--workersfcr``)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file (outside code fences), duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            a = github_anchor(m.group(2))
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out


def scanned_files():
    for name in SCANNED_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name
    for d in SCANNED_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if p.is_file() and p.suffix in TEXT_SUFFIXES and not SKIP_PARTS.intersection(p.relative_to(ROOT).parts):
                yield p


def read_text(p: Path):
    try:
        return p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


_ANCHORS: dict[Path, set[str]] = {}


def check_target(target: Path, anchor: str | None) -> str | None:
    if not target.is_file():
        return "no such file"
    if anchor:
        if target not in _ANCHORS:
            _ANCHORS[target] = anchors(target)
        if anchor not in _ANCHORS[target]:
            return f"no heading with anchor #{anchor}"
    return None


def citation_problems(rel: str, text: str) -> list[str]:
    """Broken ``docs/…md#…`` / ``README.md#…`` citations and markdown links of one file."""
    problems = []
    for no, line in enumerate(text.splitlines(), 1):
        for m in CITATION.finditer(line):
            why = check_target(ROOT / m.group(1), m.group(2))
            if why:
                problems.append(f"{rel}:{no}: {m.group(0)} — {why}")
        if rel.endswith(".md"):
            for m in MD_LINK.finditer(line):
                href = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", href) or not (href.startswith("#") or ".md" in href):
                    continue  # a URL, or a link to a file that is not markdown
                path, _, anchor = href.partition("#")
                target = (ROOT / rel).parent / path if path else ROOT / rel
                why = check_target(target.resolve(), anchor or None)
                if why:
                    problems.append(f"{rel}:{no}: ({href}) — {why}")
    return problems


def outside_material(text: str) -> list[tuple[int, str]]:
    """Lines citing design material that is not in this repository: spec/*.md, ARCHITECTURE, or a § that no
    public standard's name precedes on the line."""
    hits = []
    for no, line in enumerate(text.splitlines(), 1):
        if SPEC_DOC.search(line) or ARCHITECTURE.search(line):
            hits.append((no, line.strip()))
            continue
        for m in SECTION.finditer(line):
            if not STANDARD.search(line, 0, m.start()):
                hits.append((no, line.strip()))
                break
    return hits


def test_every_cited_document_and_section_exists():
    problems = []
    for p in scanned_files():
        rel = str(p.relative_to(ROOT))
        text = read_text(p)
        if text is not None and rel != SELF:  # this file's own examples are broken on purpose
            problems += citation_problems(rel, text)
    assert not problems, "citations of documents or sections that do not exist here:\n" + "\n".join(problems)


def test_nothing_cites_design_material_outside_the_repository():
    problems = []
    for p in scanned_files():
        rel = str(p.relative_to(ROOT))
        text = read_text(p)
        if text is None or rel in EXEMPT:
            continue
        problems += [f"{rel}:{no}: {line[:160]}" for no, line in outside_material(text)]
    assert not problems, (
        "citations of spec/*.md, ARCHITECTURE or bare § sections (not in this repository; cite "
        "docs/<file>.md#<anchor> instead):\n" + "\n".join(problems)
    )


def test_exemptions_are_still_needed():
    for rel, why in EXEMPT.items():
        text = (ROOT / rel).read_text(encoding="utf-8")
        assert outside_material(text), f"{rel} no longer needs its exemption ({why}): remove it from EXEMPT"


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("Validator — `workers.fcr`", "validator--workersfcr"),
        (
            "1. Losses: one gradient form (`workers/training/losses.py`)",
            "1-losses-one-gradient-form-workerstraininglossespy",
        ),
        ("Rules R0–R9", "rules-r0r9"),
        ("Unified bound B*", "unified-bound-b"),
        ("Special cases: DPPO's approximations are lower ends", "special-cases-dppos-approximations-are-lower-ends"),
        ("See [the API](api.md) here", "see-the-api-here"),
    ],
)
def test_anchor_rule_matches_github(heading, anchor):
    assert github_anchor(heading) == anchor


def test_the_checks_catch_what_they_are_for(tmp_path):
    """Each refusal fires on a line made to break it, and passes its fixed form."""
    assert citation_problems("x.py", "# see docs/bounds.md#no-such-section") != []
    assert citation_problems("x.py", "# see docs/no-such-file.md") != []
    assert citation_problems("x.py", "# see docs/bounds.md#the-bounds and README.md") == []
    assert citation_problems("docs/x.md", "[b](bounds.md#nope)") != []
    assert citation_problems("docs/x.md", "[b](bounds.md#budget-inversion), [web](https://example.org/a.md#z)") == []
    for bad in (
        "(spec/certificates.md §5.2)",
        "Command line (ARCHITECTURE §5)",
        "the §6.2 short-circuits",
        "(spec §10)",
    ):
        assert outside_material(bad), bad
    for ok in (
        "RFC 6962 §2.1.2 consistency proof",
        "(RFC 8785 §3.2.2.3) and the escaping of §3.2.2.2",
        "IEEE 754-2019 §7.5 (underflow)",
        "docs/intervals.md#kl-bounds",
        "https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md",
    ):
        assert not outside_material(ok), ok
