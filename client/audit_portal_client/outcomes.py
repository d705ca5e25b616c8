"""How a request or a run ends: the result of a finished run, and the errors the client raises. Apart from the
client itself so that every module of the package (uploads, runs) can name them without importing the client."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class PortalError(Exception):
    """The portal refused a request for a reason retrying cannot fix (carries the HTTP status and its message)."""

    def __init__(self, message: str, status: int | None = None, payload: dict | None = None):
        super().__init__(message)
        self.status, self.payload = status, payload or {}


class PortalUnavailable(Exception):
    """The portal did not answer in time; everything logged is still in the spool (``spool`` names the folder)."""

    def __init__(self, message: str, spool: Path | None = None):
        super().__init__(message)
        self.spool = spool


class BudgetExceeded(Exception):
    """The certificate's best bound B* is above the budget (or nothing could be certified)."""

    def __init__(self, result: "FinishResult", budget: float):
        best = result.best_bound
        what = f"certificate {result.certificate_id}" if result.certificate_id is not None else f"run {result.url}"
        said = verdict_line(result.verdict)
        super().__init__(
            (
                f"{what}: best bound B* = {best} exceeds the budget {budget}"
                if best is not None
                else f"{what}: no bound could be certified (budget {budget})"
            )
            + (f"; the portal's {said}" if said else "")
        )
        self.result, self.budget = result, budget


def verdict_line(verdict: dict | None) -> str:
    """The run's verdict as the portal words it on the run page and in its runs table (label and sentence), so a CI
    log says the same as the page; empty when the portal sent none (an older portal)."""
    if not verdict or not verdict.get("label"):
        return ""
    return f"verdict: {verdict['label']}. {verdict.get('sentence') or ''}".rstrip()


class ReplayFailed(Exception):
    """``require_replay``: the run's routing audit did not show that rollout routing replay held (its verdict is FAIL,
    UNVERIFIABLE or NOT_DECLARED, or the run carries no MoE routes). ``replay`` is the audit's verdict object."""

    def __init__(self, upload_id: int, replay: dict):
        failed = "; ".join(
            f"call {c['call_id']} at layer(s) {', '.join(map(str, c['layers_flipped']))}"
            for c in (replay.get("failed") or [])[:3]
        )
        super().__init__(
            f"upload {upload_id}: routing replay {replay.get('state')}: {replay.get('reason')}"
            + (f" ({failed})" if failed else "")
        )
        self.upload_id, self.replay = upload_id, replay


@dataclass
class FinishResult:
    upload_id: int | None  # None for a streamed run (Run.finish): its certificate is the run's live view
    run_id: int | None
    certificate_id: int | None
    url: str  # the run page (the certificate is its latest)
    certificate: dict  # the API's certificate object (summary, bounds, …), or the run's live view for Run.finish

    @property
    def best_bound(self):
        return self.certificate.get("best_bound")

    @property
    def verdict(self) -> dict | None:
        """The run's verdict (code, label, sentence): the one its run page, the runs table and the API list show."""
        return self.certificate.get("verdict") or None
