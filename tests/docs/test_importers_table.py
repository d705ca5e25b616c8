"""docs/fidelity.md's importers table is the importer registry: generated from it, listing every importer the CLI
offers, and every field table an importer module declares is in the registry (so none is left out of the docs)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from workers.fidelity.cli import IMPORT_KINDS
from workers.fidelity.importers.fields import Field, Rung
from workers.fidelity.importers.registry import IMPORTER_META, docs_table, tables_of

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "fidelity.md"
BEGIN = re.compile(r"^<!-- importers-table: .*-->\n", re.M)
END = "<!-- /importers-table -->\n"
MODULES = ("vllm", "sglang", "agl", "agl_events", "trajectories")


def _doc_table() -> str:
    text = DOC.read_text(encoding="utf-8")
    m = BEGIN.search(text)
    assert m, "docs/fidelity.md lost its importers-table marker"
    return text[m.end() : text.index(END, m.end())]


def test_the_doc_table_is_the_registry():
    assert _doc_table() == docs_table(), "regenerate it: python -m workers.fidelity.importers.registry"


def test_the_table_lists_every_importer_the_cli_offers():
    assert list(IMPORTER_META) == IMPORT_KINDS
    rows = [line for line in _doc_table().splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [re.search(r"\(`([\w-]+)`\)", row.split(" | ")[0]).group(1) for row in rows] == IMPORT_KINDS


def test_every_table_an_importer_declares_is_registered():
    registered = {ref for name in IMPORTER_META for ref in IMPORTER_META[name]["tables"]}
    declared = set()
    for mod in MODULES:
        module = importlib.import_module(f"workers.fidelity.importers.{mod}")
        for attr, value in vars(module).items():
            rows = value if isinstance(value, tuple) else ()
            if rows and all(isinstance(r, (Field, Rung)) for r in rows):
                declared.add(f"workers.fidelity.importers.{mod}:{attr}")
    assert declared - registered == set(), "declare these tables in IMPORTER_META"
    for name in IMPORTER_META:
        assert tables_of(name), name


def test_each_row_names_its_upstream_and_refusals():
    for name, meta in IMPORTER_META.items():
        assert meta["upstream"].strip() and meta["refused"].strip(), name
