"""Names a package exports but loads only on first use (PEP 562 module ``__getattr__``), so that importing the
package stays cheap: the web process imports ``workers.certify.bounds`` or ``workers.contracts.loader`` without
loading torch or HF tokenizers with the package's heavier modules. Stdlib only.

Usage, in a package's ``__init__``::

    __getattr__, __dir__ = lazy_exports(__name__, {"certify_file": "file", ...})  # name -> submodule
"""

from __future__ import annotations

import importlib
import sys


def lazy_exports(package: str, names: dict[str, str]):
    """The module ``__getattr__`` and ``__dir__`` for ``package``: each name in ``names`` is imported from
    ``package.<submodule>`` when first asked for, then kept in the package's namespace like any other name."""

    def __getattr__(name: str):
        submodule = names.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
