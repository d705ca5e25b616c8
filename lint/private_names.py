"""An import-linter contract: no package imports another package's private names.

``from workers.training.cli import _safe`` in the portal ties it to a helper its owner may rename at will; a name
another package needs is public, in the package that owns the concern. import-linter's own ``private_modules``
contract covers private *modules* (``pkg._impl``); this one covers private *names* (``_helper``) imported from
another package, at any depth of the importer (function-level imports included, as import-linter sees them).

A package is the first two parts of a module's name (``audit_portal.training``, ``workers.certify``); imports
inside one package may use its private names. Sources are read from the working directory (the root packages
live there), so nothing is imported to check them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def source_path(module: str) -> Path | None:
    base = Path(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_module(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = importer.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def private_imports(module: str) -> list[tuple[int, str, str]]:
    """(line, imported module, name) for every private name ``module`` imports from another package."""
    path = source_path(module)
    if path is None:
        return []
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = imported_module(node, module, path.name == "__init__.py")
        if package_of(source) == package_of(module):
            continue
        found += [(node.lineno, source, alias.name) for alias in node.names if is_private(alias.name)]
    return found


class NoPrivateNamesContract(Contract):
    """Options: ``containers`` (the root packages whose modules are checked), ``allow`` (``importer:name``
    pairs that stay allowed, each with its reason in the config's comments)."""

    type_name = "no_private_names"

    containers = fields.SetField(subfield=fields.StringField())
    allow = fields.SetField(subfield=fields.StringField(), required=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        allowed = set(self.allow or ())
        problems = []
        for module in sorted(graph.modules):
            if module.split(".")[0] not in self.containers:
                continue
            for line, source, name in private_imports(module):
                if f"{module}:{name}" not in allowed:
                    problems.append(f"{module} (l.{line}) imports the private name {name} from {source}")
        return ContractCheck(kept=not problems, metadata={"problems": problems})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error(
            "Private names imported from another package (make the name public where it belongs):", bold=False
        )
        output.new_line()
        for problem in check.metadata["problems"]:
            output.print_error(f"- {problem}", bold=False)
        output.new_line()
