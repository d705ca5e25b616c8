"""Kernel contracts engine (docs/contract-language.md, docs/contracts.md): contract language, the twelve classes,
the harnessed runner, three-state calibration, incidents and grades. No Django imports; torch is imported lazily so the portal
can load and list contracts without it.

Public API (docs/contracts.md#api-and-command-line): ``suite()``, ``run_contract(contract_id, impl, *, device="cpu",
seeds=None)``, ``calibrate(contract_id)``, plus ``run_suite``, ``grade``, ``run_incidents``, ``load_file``/``load_text``.
"""

SUITE_VERSION = "0.1.0"

from workers.lazy import lazy_exports  # noqa: E402 - after SUITE_VERSION, which the loader reads

from .loader import Contract, ContractError, load_file, load_suite, load_text  # noqa: E402 - after SUITE_VERSION, which the loader reads

__all__ = [
    "SUITE_VERSION",
    "Contract",
    "ContractError",
    "Verdict",
    "calibrate",
    "calibrate_all",
    "get_contract",
    "grade",
    "run_incidents",
    "load_file",
    "load_suite",
    "load_text",
    "run_contract",
    "run_incident",
    "run_suite",
    "suite",
]


def suite(directory=None) -> list:
    """All shipped contracts (highest version per id), sorted by class."""
    return load_suite(directory)


_LAZY = {
    "Verdict": "verdict",
    "run_contract": "runner",
    "run_suite": "runner",
    "get_contract": "runner",
    "calibrate": "calibration",
    "calibrate_all": "calibration",
    "run_incidents": "incidents",
    "run_incident": "incidents",
    "INCIDENTS": "incidents",
    "grade": "grading",
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)  # these import torch
