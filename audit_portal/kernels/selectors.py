"""Reads for kernel contracts (global, the shared suite) and conformance results (scoped by the caller).

The matrix, diff, badge and CI status are computed from stored verdicts; the torch-free grading helpers of
``workers.contracts.grading`` supply the interop score so the portal and the engine's CLI agree.
"""

from __future__ import annotations

from django.db.models import OuterRef, Subquery
from django.http import Http404

from audit_portal.accounts.principal import Principal
from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.jobs.outcomes import outcome
from workers.contracts.loader import CLASS_ORDER  # torch-free
from audit_portal.kernels.models import (
    FAMILY_CODES,
    PASSING_VERDICTS,
    CalibrationStatus,
    Contract,
    ContractCalibration,
    Implementation,
    Submission,
    Verdict,
)


# ------------------------------------------------------------------------------------------- contracts
def _semver_key(version: str):
    try:
        return tuple(int(x) for x in version.split("-")[0].split("+")[0].split("."))
    except ValueError:
        return (0,)


def latest_contracts(*, declared: bool = False) -> list[Contract]:
    """The highest loaded version of every contract id, in class order: the suite (the twelve classes every
    submission runs by default), or with ``declared`` the declared-property contracts a submission runs only when
    it names them."""
    latest: dict[str, Contract] = {}
    for c in Contract.objects.filter(declared=declared):
        if c.contract_id not in latest or _semver_key(c.version) > _semver_key(latest[c.contract_id].version):
            latest[c.contract_id] = c
    return sorted(latest.values(), key=contract_order)


def contract_order(contract: Contract):
    """The documented order (docs/contract-language.md#grades): families PRC, ORD, CMP, EXC, then class number, then id."""
    families = [family for family, _ in FAMILY_CODES]
    family = families.index(contract.family) if contract.family in families else len(families)
    return (family, contract.contract_class, contract.contract_id)


def contract_versions(contract_id: str) -> list[Contract]:
    versions = list(Contract.objects.filter(contract_id=contract_id))
    return sorted(versions, key=lambda c: _semver_key(c.version), reverse=True)


def contracts_named(name: str, suite=None, declared=None) -> list[Contract]:
    """The latest loaded contracts ``name`` names: a class names the suite's contract of that class, a full id a
    suite or a declared-property contract (declared ones run only when named by id). ``suite`` and ``declared``:
    :func:`latest_contracts` lists already fetched."""
    suite = latest_contracts() if suite is None else suite
    found = [c for c in suite if c.contract_id == name or c.contract_class == name]
    declared = (latest_contracts(declared=True) if declared is None else declared) if not found else []
    return found or [c for c in declared if c.contract_id == name]


def get_contract(contract_id: str, version: str | None = None) -> Contract:
    """By full id (a suite or a declared-property contract) or class (the suite's); the latest loaded version
    unless ``version``."""
    latest = contracts_named(contract_id)
    if len(latest) != 1:
        raise Http404("No such contract.")
    if version is None:
        return latest[0]
    row = Contract.objects.filter(contract_id=latest[0].contract_id, version=version).first()
    if row is None:
        raise Http404("No such contract version.")
    return row


def spec_in_source_order(contract: Contract) -> dict:
    """The stored spec with its fields in the order of the contract file (Postgres jsonb reorders keys),
    re-read from the stored source text with the engine's torch-free loader; the stored spec if that fails
    (an old version the current loader no longer accepts is still shown)."""
    from workers.contracts.loader import ContractError, load_text

    try:
        return load_text(contract.source_text, source=contract.source_name).to_dict()
    except ContractError:
        return contract.spec


FETCH = object()  # calibration_state(contract): look the latest calibration up


def latest_calibrations(contracts) -> dict[int, ContractCalibration]:
    """The latest calibration of each contract, in one query (for lists)."""
    latest: dict[int, ContractCalibration] = {}
    for cal in ContractCalibration.objects.filter(contract__in=[c.pk for c in contracts]).select_related("job"):
        latest.setdefault(cal.contract_id, cal)  # Meta ordering: newest first
    return latest


def calibration_state(contract: Contract, calibration=FETCH) -> dict:
    """{status, label, calibration}: calibrated / failed / queued / running / not yet run."""
    if calibration is FETCH:
        calibration = ContractCalibration.objects.filter(contract=contract).select_related("job").first()
    if calibration is None:
        status = CalibrationStatus.NOT_RUN
    else:
        status = calibration.status
        # a job that died before reaching this contract leaves the row queued/running: say what happened
        if (
            status in (CalibrationStatus.QUEUED, CalibrationStatus.RUNNING)
            and calibration.job
            and calibration.job.is_terminal
        ):
            status = CalibrationStatus.FAILED
    return {"status": str(status), "label": CalibrationStatus(status).label, "calibration": calibration}


def calibration_rows(calibration: ContractCalibration | None) -> list[dict]:
    """The three states as table rows: state, implementation, naive check, verdict, statistic, margin, ok."""
    if calibration is None:
        return []
    out = []
    for state in ("baseline", "violating", "conforming"):
        for row in (calibration.result.get("states") or {}).get(state, []):
            out.append({"state": state, **row, "short_impl": str(row.get("impl", "")).rpartition(":")[2]})
    return out


# ------------------------------------------------------------------------------------------ submissions
def submissions_for(principal: Principal, project=None):
    qs = Submission.objects.filter(project__in=principal.readable_projects()).select_related(
        "project", "implementation", "job"
    )
    return qs.filter(project=project) if project is not None else qs


def get_submission(principal: Principal, submission_id: int) -> Submission:
    return get_scoped_or_404(submissions_for(principal), noun="kernel submission", pk=submission_id)


def implementations_for(principal: Principal, project=None):
    qs = Implementation.objects.filter(project__in=principal.readable_projects()).select_related("project")
    return qs.filter(project=project) if project is not None else qs


def get_implementation(principal: Principal, implementation_id: int) -> Implementation:
    return get_scoped_or_404(implementations_for(principal), pk=implementation_id)


def verdicts_of(submission: Submission):
    return sorted(submission.verdicts.select_related("contract"), key=lambda v: contract_order(v.contract))


def verdict_counts(verdicts) -> dict:
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    return dict(sorted(counts.items()))


# ---------------------------------------------------------------------------------------------- matrix
def column_outcome(state: str, counts: dict) -> dict:
    """A matrix column's badge: what the kernel got once its run finished (jobs/outcomes.py, the same words as the
    job's toast), its job state before — never a green "succeeded" over a column of FAILs."""
    if state != "succeeded":
        return {"text": state, "tone": state}
    return outcome("kernel_conformance", state, {"verdict_counts": counts})


def matrix(principal: Principal, project) -> dict:
    """wpt.fyi-style: rows = contracts, columns = (implementation, platform) with their latest submission.

    Cells hold the verdict code and margin. Per column: per-family pass rates and the KC-C grade vector;
    over all columns: the interop score (share of contracts passing on every column) and the count of
    column-specific failures (contracts failing on exactly that column)."""
    from workers.contracts.grading import interop  # torch-free

    # the newest submission of each (implementation, device) in the database, not by reading the whole history
    # (a correlated subquery on the (implementation, device, -created_at) index; portable to SQLite)
    newest = (
        Submission.objects.filter(implementation=OuterRef("implementation"), device=OuterRef("device"))
        .order_by("-created_at", "-id")
        .values("pk")[:1]
    )
    columns = sorted(
        submissions_for(principal, project).filter(pk=Subquery(newest)),
        key=lambda s: (s.implementation.name.lower(), s.device),
    )
    verdicts = Verdict.objects.filter(submission__in=columns).select_related("contract")
    by_column: dict[int, dict[str, Verdict]] = {s.pk: {} for s in columns}
    for v in verdicts:
        by_column[v.submission_id][v.contract.contract_id] = v
    suite = latest_contracts()
    row_ids = [c.contract_id for c in suite]
    for cells in by_column.values():  # verdicts against contracts no longer in the latest suite keep a row
        row_ids += [cid for cid in cells if cid not in row_ids]
    titles = {c.contract_id: c for c in suite}
    rows = []
    for cid in row_ids:
        cells = [by_column[s.pk].get(cid) for s in columns]
        measured = [c for c in cells if c is not None]
        rows.append(
            {
                "contract_id": cid,
                "contract": titles.get(cid) or (measured[0].contract if measured else None),
                "cells": cells,
                "all_pass": bool(measured) and len(measured) == len(columns) and all(c.passed for c in measured),
            }
        )
    summary = (
        interop(
            {
                str(s.pk): [{"contract_id": cid, "verdict": v.verdict} for cid, v in by_column[s.pk].items()]
                for s in columns
            }
        )
        if columns
        else {"interop_score": None, "backend_specific_failures": {}}
    )
    column_info = []
    for s in columns:
        cells = by_column[s.pk].values()
        families = {}
        for family, code in FAMILY_CODES:
            fam = [v for v in cells if v.contract.family == family]
            families[code] = {
                "passed": sum(1 for v in fam if v.passed),
                "total": len(fam),
                "rate": (sum(1 for v in fam if v.passed) / len(fam)) if fam else None,
            }
        column_info.append(
            {
                "submission": s,
                "implementation": s.implementation,
                "device": s.device,
                "state": s.state,
                "outcome": column_outcome(s.state, verdict_counts(cells)),
                "families": families,
                "kc_c": s.kc_c,
                "counts": verdict_counts(cells),
                "specific_failures": summary["backend_specific_failures"].get(str(s.pk), 0),
            }
        )
    return {"columns": column_info, "rows": rows, "interop_score": summary["interop_score"], "contracts": len(row_ids)}


def implementation_history(principal: Principal, submission: Submission, limit: int = 12) -> dict:
    """wpt.fyi-style history of one implementation on one platform: its last ``limit`` submissions (oldest first)
    as columns, one row per contract class, each cell the verdict with passed/measured; a cell where a class that
    passed in the previous submission no longer passes is marked as a regression."""
    subs = list(
        submissions_for(principal, submission.project)
        .filter(implementation=submission.implementation, device=submission.device)
        .order_by("-created_at", "-id")[:limit]
    )
    subs.reverse()
    by_sub: dict[int, dict[str, Verdict]] = {s.pk: {} for s in subs}
    for v in Verdict.objects.filter(submission__in=subs).select_related("contract"):
        by_sub[v.submission_id][v.contract_class] = v
    classes = sorted({c for cells in by_sub.values() for c in cells}, key=lambda c: (CLASS_ORDER.get(c, 99), c))
    rows, regressions = [], 0
    for cls in classes:
        cells, prev = [], None
        for s in subs:
            v = by_sub[s.pk].get(cls)
            regression = bool(v is not None and prev is not None and prev.passed and not v.passed)
            regressions += regression
            cells.append(
                {
                    "verdict": v,
                    "regression": regression,
                    "version": v.contract.version if v is not None else None,
                    "count": _count_text(v),
                }
            )
            prev = v if v is not None else prev
        rows.append({"class": cls, "cells": cells})
    return {"submissions": subs, "rows": rows, "regressions": regressions}


def _count_text(v: Verdict | None) -> str:
    if v is None:
        return ""
    d = v.detail or {}
    passed, measured = d.get("passed_measurements"), d.get("measurements", v.measurements)
    return f"{passed}/{measured}" if passed is not None and measured else ""


# ------------------------------------------------------------------------------------------------ diff
def _rank(verdict: str | None) -> int:
    return {"PASS": 2, "QUALITY_WARNING": 1}.get(verdict or "", 0)


def diff(principal: Principal, a_id: int, b_id: int) -> dict:
    """Contract by contract, from submission ``a`` (before) to ``b`` (after): regressed (PASS → QUALITY_WARNING
    → anything failing counts down), improved, unchanged; contracts run on one side only are listed apart."""
    a, b = get_submission(principal, a_id), get_submission(principal, b_id)
    va = {v.contract.contract_id: v for v in verdicts_of(a)}
    vb = {v.contract.contract_id: v for v in verdicts_of(b)}
    rows, counts = [], {"regressed": 0, "improved": 0, "unchanged": 0, "only_in_a": 0, "only_in_b": 0}
    for cid in list(va) + [c for c in vb if c not in va]:
        x, y = va.get(cid), vb.get(cid)
        if x is None or y is None:
            change = "only_in_b" if x is None else "only_in_a"
        else:
            delta = _rank(y.verdict) - _rank(x.verdict)
            change = "improved" if delta > 0 else "regressed" if delta < 0 else "unchanged"
        counts[change] += 1
        rows.append(
            {
                "contract_id": cid,
                "contract_class": (x or y).contract_class,
                "change": change,
                "a": _verdict_brief(x),
                "b": _verdict_brief(y),
            }
        )
    grade_a, grade_b = a.kc_c or {}, b.kc_c or {}
    return {
        "a": a.pk,
        "b": b.pk,
        "counts": counts,
        "contracts": rows,
        "kc_c": {
            "a": grade_a or None,
            "b": grade_b or None,
            "delta": {k: (grade_b.get(k) or 0) - (grade_a.get(k) or 0) for k in grade_a or grade_b}
            if (grade_a or grade_b)
            else None,
        },
    }


def _verdict_brief(v: Verdict | None) -> dict | None:
    if v is None:
        return None
    return {
        "verdict": v.verdict,
        "margin": v.margin,
        "margin_infinite": v.margin_infinite,
        "version": v.contract.version,
    }


# ------------------------------------------------------------------------------------ CI status, badge
def latest_submission(principal: Principal, implementation: Implementation, device: str | None = None):
    return _newest(submissions_for(principal).filter(implementation=implementation), device)


def _newest(submissions, device: str | None):
    if device:
        submissions = submissions.filter(device=device)
    return submissions.order_by("-created_at", "-id").first()


def ci_status(principal: Principal, implementation: Implementation, device: str | None = None) -> dict:
    """CI payload for the implementation's latest submission. ``state`` uses the commit-status vocabulary:
    success (every contract passes), failure (some contract does not), pending (queued or running),
    error (the job itself failed or was cancelled, or nothing was ever submitted)."""
    return _status(implementation, latest_submission(principal, implementation, device))


def implementation_for_badge(token: str) -> Implementation:
    """The implementation whose public badge token this is (404 for an unknown, retired or empty token)."""
    implementation = Implementation.objects.filter(badge_token=token).first() if token else None
    if implementation is None:
        raise Http404("No such badge.")
    return implementation


def public_badge_status(implementation: Implementation, device: str | None = None) -> dict:
    """What the public badge shows: the state and grade of the latest submission, nothing that links into the
    project (no submission id, no page link)."""
    status = _status(implementation, _newest(Submission.objects.filter(implementation=implementation), device))
    return {k: status[k] for k in ("state", "kc_c", "passed", "total")}


def _status(implementation: Implementation, submission: Submission | None) -> dict:
    base = {"implementation": implementation.pk, "name": implementation.name, "reference": implementation.reference}
    if submission is None:
        return {
            **base,
            "state": "error",
            "description": "no conformance submission yet",
            "submission": None,
            "isolation": [],
            "kc_c": None,
            "kc_a": None,
            "kc_t": None,
            "meets_target": None,
            "counts": {},
            "passed": 0,
            "total": 0,
            "link": None,
        }
    verdicts = list(verdicts_of(submission))
    counts = verdict_counts(verdicts)
    passed = sum(1 for v in verdicts if v.verdict in PASSING_VERDICTS)
    job_state = submission.state
    if job_state in ("queued", "running"):
        state = "pending"
    elif job_state != "succeeded":
        state = "error"
    else:
        state = "success" if passed == len(verdicts) and verdicts else "failure"
    kc_c = submission.kc_c
    grade_text = " ".join(f"{k} {'-' if v is None else v}" for k, v in kc_c.items()) if kc_c else "not graded"
    # a declared KC-T is part of the verdict: every contract passing is not enough when a family is below target
    unmet = [r for r in submission.target_rows if not r["met"]] if state in ("success", "failure") else []
    if unmet and state == "success":
        state = "failure"
    description = {
        "pending": f"{len(verdicts)}/{len(submission.plan)} contracts run",
        "error": f"conformance job {job_state}",
        "success": f"{passed}/{len(verdicts)} contracts pass; KC-C {grade_text}",
        "failure": f"{passed}/{len(verdicts)} contracts pass; KC-C {grade_text}",
    }[state]
    if unmet:
        description += "; below target: " + ", ".join(
            f"{r['family']} {'-' if r['achieved'] is None else r['achieved']} < {r['needed']}" for r in unmet
        )
    isolation = submission.isolation if verdicts else []
    if "none" in isolation:
        description += "; measured UNISOLATED (operator setting)"
    return {
        **base,
        "state": state,
        "description": description,
        "submission": submission.pk,
        "isolation": isolation,
        "device": submission.device,
        "kc_c": kc_c,
        "kc_a": submission.kc_a,
        "kc_t": submission.target or None,
        "meets_target": (not unmet) if submission.target_rows else None,
        "counts": counts,
        "passed": passed,
        "total": len(submission.plan),
        "link": f"/p/{submission.project.slug}/kernels/submissions/{submission.pk}/",
    }


BADGE_COLOURS = {"success": "#2e8540", "failure": "#c0392b", "pending": "#2f6fbf", "error": "#7a7f8a"}


def badge_svg(status: dict) -> str:
    """A shields-style flat badge: 'kernel contracts | KC-C PRC 3 ORD 3 …' coloured by the CI state."""
    from xml.sax.saxutils import escape

    label = "kernel contracts"
    if status["state"] in ("success", "failure") and status.get("kc_c"):
        message = " ".join(f"{k}{'-' if v is None else v}" for k, v in status["kc_c"].items())
        if status["state"] == "failure":
            message = f"{status['passed']}/{status['total']} pass · {message}"
    else:
        message = {"pending": "running", "error": "no result"}.get(status["state"], status["state"])
    colour = BADGE_COLOURS[status["state"]]
    lw, mw = 6 * len(label) + 12, 6 * len(message) + 12  # ~6 px a character at 11 px Verdana
    total = lw + mw
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="20" role="img" '
        f'aria-label="{escape(label)}: {escape(message)}"><title>{escape(label)}: {escape(message)}</title>'
        f'<rect width="{lw}" height="20" fill="#555"/><rect x="{lw}" width="{mw}" height="20" fill="{colour}"/>'
        f'<g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">'
        f'<text x="{lw / 2}" y="14">{escape(label)}</text><text x="{lw + mw / 2}" y="14">{escape(message)}</text>'
        f"</g></svg>"
    )
