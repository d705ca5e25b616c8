"""The attestations app's consistency check (registered with :mod:`audit_portal.jobs.consistency`): the whole
transparency log verifies (:func:`audit_portal.attestations.selectors.verify_log`); a witness that lags the log
is a warning."""

from __future__ import annotations

from audit_portal.attestations import selectors
from audit_portal.jobs.consistency import Report, Scope, register


@register
def check_transparency_log(report: Report, scope: Scope) -> None:
    try:
        outcome = selectors.verify_log()
    except Exception as exc:  # noqa: BLE001 - a log that cannot be verified is a problem, reported with its reason
        report.problem(f"transparency log does not verify: {type(exc).__name__}: {exc}")
        return
    report.counts["transparency_log"] = 1
    for message in outcome.problems:
        report.problem(f"transparency log: {message}")
    for message in outcome.warnings:
        report.warn(f"transparency log: {message}")
