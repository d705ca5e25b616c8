"""The result of one contract run (docs/contract-language.md#verdicts): the verdict word, the headline figures
(statistic, bound, margin), the failing clause, the coverage statement, the environment and the per-measurement
trace; and how they are written as JSON. Torch-free."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from . import SUITE_VERSION
from workers.jsonsafe import finite_or_none

VERDICTS = ("PASS", "FAIL", "NOT_APPLICABLE", "NOT_DECLARED", "QUALITY_WARNING", "INCONCLUSIVE", "CRASH", "TIMEOUT")


def signature_json(obj):
    """Signatures and traces keep an infinite error as "inf" (the finding itself; null would read as "not
    measured"); the headline numbers go through :func:`workers.jsonsafe.finite_or_none` instead (the reason and
    ``margin_infinite`` say why one is null)."""
    if isinstance(obj, dict):
        return {str(k): signature_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [signature_json(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else (None if math.isnan(obj) else ("inf" if obj > 0 else "-inf"))
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


@dataclass
class Verdict:
    """Result of one contract run. ``margin = statistic / bound`` (0 when a T0 bound of 0 is met, inf when
    it is missed; ``to_dict`` writes non-finite numbers as null)."""

    verdict: str
    contract_id: str
    contract_version: str = ""
    contract_class: str = ""
    family: str = ""
    statistic: float | None = None
    statistic_name: str = ""
    bound: float | None = None
    margin: float | None = None
    signature: dict = field(default_factory=dict)
    reason: str = ""
    trace: list = field(default_factory=list)
    impl_id: str = ""
    impl_hash: str | None = None
    device: str = "cpu"
    environment: dict = field(default_factory=dict)
    seeds: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    measurements: int = 0
    passed_measurements: int = 0
    failing_clause: dict = field(default_factory=dict)
    coverage: dict = field(default_factory=dict)
    track: str = "closed"
    declaration: dict = field(default_factory=dict)
    assurance_level: int = 0
    harness: dict = field(default_factory=dict)
    duration_s: float = 0.0
    suite_version: str = SUITE_VERSION

    @property
    def passed(self) -> bool:
        return self.verdict in ("PASS", "QUALITY_WARNING")

    def to_dict(self, *, include_trace: bool = True) -> dict:
        d = asdict(self)
        for k in ("statistic", "bound", "margin"):
            d[k] = finite_or_none(d[k])
        if not include_trace:
            d.pop("trace")
        return signature_json(d)

    def write_trace(self, path) -> None:
        """Append the per-measurement trace as JSON lines (the trace record of
        docs/contract-language.md#the-parts-of-a-contract)."""
        with open(path, "a", encoding="utf-8") as fh:
            for rec in self.trace:
                fh.write(json.dumps(signature_json(rec), sort_keys=True) + "\n")
