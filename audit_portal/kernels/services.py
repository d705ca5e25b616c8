"""Writes for kernel contracts and conformance submissions.

The web process never imports torch nor any submitted kernel: an uploaded module is only *parsed*
(``ast.parse``) here, stored by SHA-256 in the artifact store, and imported later inside the engine's
sandboxed child process on a worker. The contract loader and the grader of ``workers.contracts`` are
torch-free by design, so they may be used here.
"""

from __future__ import annotations

import hashlib
import json
import re
import os
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from audit_portal import task_names
from audit_portal.accounts.models import Project
from audit_portal.core.storage import artifact_path
from audit_portal.jobs.services import create_job
from audit_portal.kernels.models import (
    CALIBRATION_QUEUE,
    QUEUE_FOR_DEVICE,
    CalibrationStatus,
    Contract,
    ContractCalibration,
    Device,
    Implementation,
    ImplementationKind,
    Submission,
    Verdict,
)
from audit_portal.kernels.submission_input import (
    FUNCTION_RE,
    CheckedModule,
    KernelSubmissionError,
    parse_contract_selection,
    parse_function_map,
    parse_import_path,
    resolve_contracts,
)
from workers.contracts.deployment import parse_flags, parse_target
from workers.jsonsafe import finite_or_none

SIGNING_QUEUE = "cpu"  # a role that holds the signing key and never runs submitted code
# Calibration concerns the shared suite, not a tenant's data, but every Job belongs to a project: its jobs
# live in this member-less project (visible to superusers only), and the results on the contract pages.
SUITE_PROJECT_SLUG = "kernel-contract-suite"


# ------------------------------------------------------------------------------------------ contracts
class ContractLoadError(Exception):
    """A contract file that cannot be loaded, or an in-place edit of a loaded version."""


@dataclass
class LoadReport:
    created: list[Contract] = field(default_factory=list)
    unchanged: list[Contract] = field(default_factory=list)


def parse_contract_files(paths) -> list:
    """Parse and validate contract files with the engine's (torch-free) loader; the first problem raises
    :class:`ContractLoadError` naming the file, the field and its line."""
    from workers.contracts.loader import ContractError, load_file

    parsed, seen = [], {}
    for path in sorted(Path(p) for p in paths):
        try:
            contract = load_file(path)
        except ContractError as exc:
            raise ContractLoadError(str(exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ContractLoadError(f"{path}: cannot read contract file: {exc}") from None
        key = (contract.id, contract.version)
        if key in seen and seen[key].sha256 != contract.sha256:
            raise ContractLoadError(
                f"{path.name} and {Path(seen[key].path).name} both define {contract.id} "
                f"version {contract.version} with different text"
            )
        seen[key] = contract
        parsed.append(contract)
    return parsed


def load_contract_files(paths, *, declared: bool = False) -> LoadReport:
    """Load contract files into the database, all or nothing (see :func:`store_contracts`)."""
    return store_contracts(parse_contract_files(paths), declared=declared)


def store_contracts(parsed, *, declared: bool = False) -> LoadReport:
    """Store parsed contracts (``workers.contracts.Contract``), all or nothing; ``declared``: they are
    declared-property contracts (run only when a submission names them).

    Versioning: (id, version) is immutable. A contract whose id and version are already loaded with the same
    text is unchanged; with a different text it is refused (an edit in place would silently change what
    earlier verdicts were measured against) — a changed contract needs a new ``identifier.version``."""
    report = LoadReport()
    with transaction.atomic():
        for contract in parsed:
            existing = (
                Contract.objects.select_for_update().filter(contract_id=contract.id, version=contract.version).first()
            )
            if existing is not None:
                if existing.declared != declared:
                    raise ContractLoadError(
                        f"{Path(contract.path).name}: {contract.id} version {contract.version} is already loaded as "
                        f"{'a declared-property' if existing.declared else 'a suite'} contract; a contract id is one "
                        "or the other."
                    )
                if existing.sha256 != contract.sha256:
                    raise ContractLoadError(
                        f"{Path(contract.path).name}: {contract.id} version {contract.version} is already loaded with "
                        f"different text (sha256 {existing.sha256[:12]}…, now {contract.sha256[:12]}…). Contracts are "
                        "never edited in place: give the changed contract a new identifier.version."
                    )
                if existing not in report.unchanged:
                    report.unchanged.append(existing)
                continue
            spec = contract.to_dict()
            spec.pop("source_text", None)
            report.created.append(
                Contract.objects.create(
                    contract_id=contract.id,
                    version=contract.version,
                    contract_class=contract.cls,
                    family=contract.family,
                    title=contract.title[:300],
                    protocol=contract.protocol,
                    signature=contract.signature[:300],
                    spec=spec,
                    source_text=contract.source_text,
                    sha256=contract.sha256,
                    source_name=Path(contract.path).name[:300],
                    declared=declared,
                )
            )
    return report


def suite_project() -> Project:
    project, _ = Project.objects.get_or_create(
        slug=SUITE_PROJECT_SLUG,
        defaults={
            "name": "Kernel contract suite",
            "description": "Calibration jobs of the shared kernel contract suite (no members).",
        },
    )
    return project


def queue_calibration(contracts, *, submitted_by: str = "system"):
    """Queue one calibration job over ``contracts`` (Contract rows); returns the job, or None if empty."""
    contracts = list(contracts)
    if not contracts:
        return None
    with transaction.atomic():
        job = create_job(
            project=suite_project(),
            kind="calibrate_contracts",
            task_name=task_names.CALIBRATE_CONTRACTS,
            queue=CALIBRATION_QUEUE,
            title=f"Calibrate {len(contracts)} contract version(s)",
            params={"contracts": [c.pk for c in contracts]},
            subject_kind="contract_suite",
            submitted_by=submitted_by,
        )
        ContractCalibration.objects.bulk_create(
            [ContractCalibration(contract=c, job=job, status=CalibrationStatus.QUEUED) for c in contracts]
        )
    return job


def begin_calibration(job, contract: Contract) -> ContractCalibration:
    calibration = ContractCalibration.objects.filter(job=job, contract=contract).first() or ContractCalibration(
        job=job, contract=contract
    )
    calibration.status = CalibrationStatus.RUNNING
    calibration.save()
    return calibration


def record_calibration(calibration: ContractCalibration, result: dict) -> ContractCalibration:
    calibration.result = result
    calibration.problems = list(result.get("problems") or [])
    calibration.status = CalibrationStatus.CALIBRATED if result.get("ok") else CalibrationStatus.FAILED
    calibration.finished_at = timezone.now()
    calibration.save()
    return calibration


def fail_pending_calibrations(job, reason: str) -> int:
    """Mark the job's unfinished calibrations failed with the reason (the harness failed, a version went away)."""
    return ContractCalibration.objects.filter(
        job=job, status__in=[CalibrationStatus.QUEUED, CalibrationStatus.RUNNING]
    ).update(status=CalibrationStatus.FAILED, problems=[reason])


def kernel_storage_name(sha256: str) -> str:
    return f"kernels/{sha256[:2]}/{sha256}.py"


def _store_module(module: CheckedModule) -> str:
    name = kernel_storage_name(module.sha256)
    target = artifact_path(name)
    if not target.exists():  # content-addressed: the same bytes are stored once
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.part")
        tmp.write_bytes(module.data)
        os.replace(tmp, target)
    return name


def _function_for(contract: Contract, default: str | None, mapping: dict[str, str]) -> str:
    # a class in the mapping names the suite's contract of that class, never a declared property of the class
    # (C-ORD-03's linear is not its batch-invariant softmax)
    return (
        mapping.get(contract.contract_id)
        or (None if contract.declared else mapping.get(contract.contract_class))
        or default
        or contract.default_function
    )


def _fingerprint(kind: str, reference: str, default_function: str | None, mapping: dict) -> str:
    canonical = json.dumps(
        {"kind": kind, "reference": reference, "default": default_function, "functions": mapping}, sort_keys=True
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@transaction.atomic
def submit_conformance(
    *,
    project: Project,
    submitted_by: str,
    device: str,
    contracts: list[str],
    import_path: str | None = None,
    module: CheckedModule | None = None,
    module_filename: str = "",
    function: str | None = None,
    functions=None,
    name: str = "",
    deployment_flags=None,
    target=None,
) -> Submission:
    """Validate a conformance submission, record the implementation and queue one job for it.

    Exactly one of ``import_path`` and ``module``. ``function`` (one name for every contract) and
    ``functions`` ({contract id or class: name}) choose the callables; otherwise each contract's signature
    (docs/contract-language.md#the-twelve-classes)
    function name is used (for an uploaded module without an explicit contract list: only the contracts
    whose function the module defines). ``deployment_flags`` (KC-A) and ``target`` (KC-T): see
    :mod:`workers.contracts.deployment`."""
    try:
        flags = parse_flags(deployment_flags)
    except ValueError as exc:
        raise KernelSubmissionError(
            f"deployment_flags: {exc}.", code="invalid_deployment_flags", extra={"field": "deployment_flags"}
        ) from None
    try:
        kc_t = parse_target(target)
    except ValueError as exc:
        raise KernelSubmissionError(f"target: {exc}.", code="invalid_target", extra={"field": "target"}) from None
    if device not in Device.values:
        raise KernelSubmissionError(
            f"Unknown platform {device!r}; use one of: {', '.join(Device.values)}.", code="unknown_platform"
        )
    if bool(import_path) == bool(module):
        raise KernelSubmissionError(
            "Give either an import path ('impl') or an uploaded kernel module ('module').",
            code="implementation_missing",
        )
    mapping = parse_function_map(functions)
    if function and not FUNCTION_RE.match(function):
        raise KernelSubmissionError(f"Not a Python function name: {function!r}.", code="invalid_function_map")
    selection = parse_contract_selection(contracts)
    chosen = resolve_contracts(selection)
    keys = {c.contract_id for c in chosen} | {c.contract_class for c in chosen}
    stray = sorted(k for k in mapping if k not in keys)
    if stray:
        raise KernelSubmissionError(
            f"'functions' names contract(s) not in this submission: {', '.join(stray)}.",
            code="unknown_contract",
            extra={"unknown": stray},
        )

    if import_path:
        module_name, path_function = parse_import_path(import_path)
        default = function or path_function
        kind, reference = ImplementationKind.IMPORT_PATH, import_path.strip()
        plan_contracts = chosen
    else:
        default = function
        kind, reference = ImplementationKind.UPLOADED_MODULE, module.sha256
        defined = module.top_level_names
        if selection or mapping or function:
            missing = [
                f"{c.contract_class} needs {_function_for(c, default, mapping)!r}"
                for c in chosen
                if _function_for(c, default, mapping).split(".")[0] not in defined
            ]
            if missing:
                raise KernelSubmissionError(
                    f"{module_filename or 'the module'} does not define: {'; '.join(missing)}.",
                    code="function_not_found",
                    extra={"missing": missing},
                )
            plan_contracts = chosen
        else:
            plan_contracts = [c for c in chosen if c.default_function in defined]
            if not plan_contracts:
                wanted = sorted({c.default_function for c in chosen})
                raise KernelSubmissionError(
                    f"{module_filename or 'the module'} defines none of the suite's functions ({', '.join(wanted)}); "
                    "name them, or map contracts to your functions with 'functions'.",
                    code="function_not_found",
                )

    implementation, _ = Implementation.objects.get_or_create(
        project=project,
        fingerprint=_fingerprint(kind, reference, default, mapping),
        defaults=dict(
            name=(name or (module_filename if module else import_path) or "kernel")[:200],
            kind=kind,
            import_path=import_path.strip() if import_path else "",
            functions=mapping,
            code_sha256=module.sha256 if module else "",
            code_size=len(module.data) if module else None,
            storage_name=_store_module(module) if module else "",
            original_filename=module_filename[:255],
            created_by=submitted_by,
        ),
    )
    plan = [
        {
            "contract": c.pk,
            "contract_id": c.contract_id,
            "version": c.version,
            "class": c.contract_class,
            "label": c.label,
            "function": _function_for(c, default, mapping),
        }
        for c in plan_contracts
    ]
    submission = Submission.objects.create(
        project=project,
        implementation=implementation,
        device=device,
        plan=plan,
        submitted_by=submitted_by,
        deployment_flags=flags,
        target=kc_t,
    )
    submission.job = create_job(
        project=project,
        kind="kernel_conformance",
        task_name=task_names.RUN_KERNEL_SUBMISSION,
        queue=QUEUE_FOR_DEVICE[device],
        title=f"Conformance: {implementation.name} on {device} ({len(plan)} contract(s))",
        params={"submission": submission.pk},
        subject_kind="kernel_submission",
        subject_id=submission.pk,
        submitted_by=submitted_by,
    )
    submission.save(update_fields=["job"])
    return submission


# ------------------------------------------------------------------------------------ worker-side writes
def impl_reference(submission: Submission, entry: dict) -> str:
    """What the engine loads (inside its sandboxed child): 'package.module:function' or '/abs/file.py:function'."""
    impl = submission.implementation
    if impl.kind == ImplementationKind.UPLOADED_MODULE:
        return f"{artifact_path(impl.storage_name)}:{entry['function']}"
    module_name, _ = parse_import_path(impl.import_path)
    return f"{module_name}:{entry['function']}"


def trace_storage_name(submission: Submission, contract: Contract) -> str:
    """One trace per contract of a submission: a suite contract's by its class, a declared-property contract's
    (which shares its class with a suite contract) by its id made safe for a file name."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", contract.contract_id) if contract.declared else contract.contract_class
    return f"kernel-traces/{submission.pk}/{name}.jsonl"


def record_verdict(
    submission: Submission, contract: Contract, detail: dict, *, margin_infinite: bool, trace_storage: str = ""
) -> Verdict:
    """Store one contract's verdict (replacing one from an earlier, interrupted attempt)."""
    values = dict(
        contract_class=contract.contract_class,
        verdict=str(detail.get("verdict"))[:20],
        statistic_name=str(detail.get("statistic_name") or "")[:60],
        statistic=finite_or_none(detail.get("statistic")),
        bound=finite_or_none(detail.get("bound")),
        margin=finite_or_none(detail.get("margin")),
        margin_infinite=margin_infinite,
        reason=str(detail.get("reason") or ""),
        signature=detail.get("signature") or {},
        assurance_level=int(detail.get("assurance_level") or 0),
        measurements=int(detail.get("measurements") or 0),
        impl_hash=str(detail.get("impl_hash") or "")[:64],
        detail=detail,
        trace_storage=trace_storage,
        duration_s=float(detail.get("duration_s") or 0.0),
        created_at=timezone.now(),
    )
    verdict, _ = Verdict.objects.update_or_create(submission=submission, contract=contract, defaults=values)
    if not submission.environment and detail.get("environment"):
        submission.environment = detail["environment"]
        submission.save(update_fields=["environment"])
    return verdict


@transaction.atomic
def finish_submission(submission: Submission, grade: dict) -> Submission:
    """Store the grade and queue the signature. The kernels worker that measured the verdicts holds no signing
    key: a job on the signing queue signs the stored rows and appends them to the transparency log."""
    submission.grade = grade
    submission.finished_at = timezone.now()
    submission.save(update_fields=["grade", "finished_at"])
    create_job(
        project=submission.project,
        kind="kernel_signature",
        task_name=task_names.SIGN_KERNEL_SUBMISSION,
        queue=SIGNING_QUEUE,
        title=f"Sign conformance result of submission {submission.pk}",
        params={"submission": submission.pk},
        subject_kind="kernel_signature",
        subject_id=submission.pk,
        submitted_by=submission.submitted_by,
    )
    return submission


def sign_submission(submission: Submission):
    """Sign the finished submission's stored verdicts and grade (a failure fails the signing job, with the reason)."""
    from audit_portal.attestations.services import attest_verdict

    if submission.finished_at is None:
        raise ValueError(f"submission {submission.pk} is not finished: nothing to sign")
    return attest_verdict(submission)


def publish_badge(implementation: Implementation) -> str:
    """Give the implementation a public badge URL (``/badges/kernels/<token>.svg``) — or a new one, which retires
    the old URL. The token is the only secret: 192 random bits, so the URL cannot be guessed from ids."""
    import secrets

    implementation.badge_token = secrets.token_urlsafe(24)
    implementation.save(update_fields=["badge_token"])
    return implementation.badge_token


def unpublish_badge(implementation: Implementation) -> None:
    implementation.badge_token = ""
    implementation.save(update_fields=["badge_token"])
