"""Writes for fidelity audits and registered tokenizers.

An audit job calls ``begin`` (replacing any earlier, possibly partial, report of the same upload and its call rows in
one transaction: retries are idempotent), ``add_calls`` (bulk inserts, batch by batch as the engine streams them; an
attempt whose report was replaced by a newer attempt stops with :class:`ReportSuperseded` instead of writing into
it), ``store_masks`` (the loss-mask export into the artifact store) and ``complete`` — the one place a finished
report is stored — with the engine's report.
"""

from __future__ import annotations

import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit_portal.attestations.services import attest_fidelity_report
from audit_portal.core.errors import PortalError
from audit_portal.core.storage import artifact_path
from audit_portal.fidelity.models import FidelityCall, FidelityReport, RegisteredTokenizer

BATCH = 5000
TOKENIZER_MAX_BYTES = 64 * 1024 * 1024  # production tokenizer.json files are 2–30 MB
MAX_STORED_SPANS = 10_000  # per call; beyond this the call's spans are cut (flagged) — spans are not token rows
MASK_FORMATS = {"jsonl": "masks.jsonl", "bin": "masks.bin"}


class InvalidTokenizer(PortalError):
    default_code = "invalid_tokenizer"


class ReportSuperseded(Exception):
    """The report this attempt writes into was replaced by a newer attempt of the audit (``begin``)."""


# ------------------------------------------------------------------------------------------- tokenizers
def parse_tokenizer(data: bytes) -> dict:
    """Check an uploaded tokenizer and say what it is: ``{kind, sha256, content, vocab_size}`` (``content`` = the
    bytes to store). The file is parsed in a process of its own under memory and time limits
    (:mod:`workers.fidelity.tokenizer_check`), never in the web process. Raises :class:`InvalidTokenizer` naming the
    problem (``tokenizer_too_complex`` past the checker's limits)."""
    from workers.fidelity.tokenizer_check import check_in_child

    with tempfile.TemporaryDirectory(prefix="tokenizer-check-") as tmp:
        path = Path(tmp) / "tokenizer.json"
        path.write_bytes(data)
        answer = check_in_child(path, Path(tmp) / "canonical.json")
    if not answer.get("ok"):
        raise InvalidTokenizer(
            answer.get("message") or "The tokenizer file could not be checked.",
            code=answer.get("code") or "invalid_tokenizer",
        )
    return {
        "kind": answer["kind"],
        "sha256": answer["sha256"],
        "vocab_size": answer["vocab_size"],
        "content": answer["canonical"] if answer["kind"] == RegisteredTokenizer.Kind.TOY_VOCAB else data,
    }


def register_tokenizer(*, project, data: bytes, name: str, uploaded_by: str) -> tuple[RegisteredTokenizer, bool]:
    """Store a tokenizer by its SHA-256 and register it with the project. The same tokenizer again returns the first
    registration with ``created=False``."""
    if len(data) > TOKENIZER_MAX_BYTES:
        raise InvalidTokenizer(
            f"The tokenizer file is larger than {TOKENIZER_MAX_BYTES >> 20} MiB.", code="tokenizer_too_large"
        )
    parsed = parse_tokenizer(data)
    sha = parsed["sha256"]
    existing = RegisteredTokenizer.objects.filter(project=project, sha256=sha).first()
    if existing is not None:
        return existing, False
    storage_name = f"fidelity/tokenizers/{sha[:2]}/{sha}.json"
    target = artifact_path(storage_name)
    if not target.exists():  # content-addressed: identical bytes for every project that registers it
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.part")
        tmp.write_bytes(parsed["content"])
        os.replace(tmp, target)
    try:
        with transaction.atomic():
            tok = RegisteredTokenizer.objects.create(
                project=project,
                name=(name or "tokenizer.json")[:200],
                sha256=sha,
                kind=parsed["kind"],
                size_bytes=len(parsed["content"]),
                vocab_size=parsed["vocab_size"],
                storage_name=storage_name,
                uploaded_by=uploaded_by[:150],
            )
    except IntegrityError:  # a concurrent registration of the same tokenizer won
        return RegisteredTokenizer.objects.get(project=project, sha256=sha), False
    return tok, True


def register_uploaded_tokenizer(*, project, uploaded, name, uploaded_by) -> tuple[RegisteredTokenizer, bool]:
    """:func:`register_tokenizer` for a multipart upload (API and browser form)."""
    if uploaded.size is not None and uploaded.size > TOKENIZER_MAX_BYTES:
        raise InvalidTokenizer(
            f"The tokenizer file is larger than {TOKENIZER_MAX_BYTES >> 20} MiB.", code="tokenizer_too_large"
        )
    uploaded.seek(0)
    return register_tokenizer(
        project=project, data=uploaded.read(), name=(name or uploaded.name or "").strip(), uploaded_by=uploaded_by
    )


@lru_cache(maxsize=8)
def _load(storage_name: str, kind: str, name: str):
    from workers.fidelity.tokenizer import FidelityTokenizer  # a drill-down page decodes with it; lazily

    path = artifact_path(storage_name)
    if kind == RegisteredTokenizer.Kind.TOY_VOCAB:
        return FidelityTokenizer.toy(json.loads(path.read_text("utf-8")), id=name)
    return FidelityTokenizer.from_file(path, id=name)


def load_tokenizer(registered: RegisteredTokenizer):
    """The engine's tokenizer for a registration (cached per process: a large tokenizer.json takes ~1 s to load)."""
    tok = _load(registered.storage_name, registered.kind, registered.name)
    if tok.sha256 != registered.sha256:  # the stored file changed under us: never trust it
        raise ValueError(f"stored tokenizer {registered.storage_name} no longer hashes to {registered.sha256}")
    return tok


# ------------------------------------------------------------------------------------------- reports
def begin(upload, options: dict) -> FidelityReport:
    with transaction.atomic():
        FidelityReport.objects.filter(upload=upload).delete()
        return FidelityReport.objects.create(
            project=upload.project,
            run=upload.run,
            upload=upload,
            mode=options.get("mode", "transition"),
            options=options,
        )


def _compact_spans(spans: list[dict]) -> list:
    return [[s["start"], s["end"], list(s["reasons"])] for s in spans[:MAX_STORED_SPANS]]


def _certificate_counts(cert):
    if not cert:
        return None
    return {k: v for k, v in cert.items() if k not in ("lo", "hi", "gap", "binary_tv", "decision")}


def _text(value, limit):
    return "" if value is None else str(value)[:limit]


def add_calls(report: FidelityReport, entries: list[dict]) -> int:
    """Bulk-insert one batch of the engine's call entries (``byte_offset``: the line's offset in a plain upload, so
    the drill-down reads one line). The report row is locked for the batch: if a newer attempt replaced it, raise
    :class:`ReportSuperseded` rather than write rows nobody will read."""
    objs = []
    for e in entries:
        reasons = list(e.get("reasons") or [])
        malformed = e.get("malformed")
        spans = e.get("spans") or []
        if len(spans) > MAX_STORED_SPANS:
            malformed = (malformed or []) + [
                {"field": "spans", "reason": f"{len(spans)} spans; first {MAX_STORED_SPANS} stored"}
            ]
        objs.append(
            FidelityCall(
                report=report,
                line=e["line"],
                byte_offset=e.get("byte_offset"),
                call_id=_text(e.get("call_id"), 200),
                trajectory_id=_text(e.get("trajectory_id"), 200),
                call_index=e.get("call_index"),
                sample_id=_text(e.get("sample_id"), 200),
                step=e.get("step"),
                role=e.get("role") or "unknown",
                role_source=_text(e.get("role_source"), 12),
                purpose=_text(e.get("purpose"), 100),
                inferred_purpose=_text(e.get("inferred_purpose"), 100),
                verdict=e["verdict"],
                primary_reason=e.get("primary_reason") or "",
                reasons=reasons,
                reasons_flat=("|" + "|".join(reasons) + "|") if reasons else "",
                spans=_compact_spans(spans),
                n_tokens=e.get("n_tokens") or 0,
                verifiable_tokens=e.get("verifiable_tokens") or 0,
                loss_mask_used=bool(e.get("loss_mask_used")),
                closed_failure_violations=e.get("closed_failure_violations") or 0,
                drift_if_retokenized=e.get("drift_if_retokenized"),
                lineage=_text(e.get("lineage"), 40),
                rules=e.get("rules") or {},
                alignment=e.get("alignment"),
                certificate=_certificate_counts(e.get("certificate")),
                malformed=malformed,
            )
        )
    with transaction.atomic():
        if not FidelityReport.objects.select_for_update().filter(pk=report.pk).exists():
            raise ReportSuperseded(f"fidelity report {report.pk} was replaced by a newer attempt")
        FidelityCall.objects.bulk_create(objs, batch_size=BATCH)
    return len(objs)


def mask_storage_name(upload, fmt: str) -> str:
    return f"fidelity/uploads/{upload.pk}/{MASK_FORMATS[fmt]}"


def store_masks(upload, jsonl_path: Path) -> dict:
    """Move the engine's JSONL mask export into the artifact store and write its compact binary form (the engine's
    own writer, so the layout is the one :func:`workers.fidelity.read_masks` reads). Replaces earlier exports."""
    from workers.fidelity.masks_export import MaskWriter, read_masks

    files = {}
    target = artifact_path(mask_storage_name(upload, "jsonl"))
    target.parent.mkdir(parents=True, exist_ok=True)
    bin_target = artifact_path(mask_storage_name(upload, "bin"))
    bin_tmp = bin_target.with_suffix(".bin.part")
    writer = MaskWriter(bin_tmp, "bin")
    try:
        for call_id, mask in read_masks(jsonl_path):
            writer.write({"call_id": call_id}, mask)
    finally:
        info = writer.close()
    os.replace(jsonl_path, target)
    os.replace(bin_tmp, bin_target)
    for fmt, path in (("jsonl", target), ("bin", bin_target)):
        files[fmt] = {"storage_name": mask_storage_name(upload, fmt), "size_bytes": path.stat().st_size}
    return {"calls": info["calls"], "tokens_on": info["tokens_on"], "files": files}


@transaction.atomic
def complete(report: FidelityReport, result: dict, *, tokenizers: dict, masks: dict) -> FidelityReport:
    if not FidelityReport.objects.select_for_update().filter(pk=report.pk).exists():  # never resurrect a replaced one
        raise ReportSuperseded(f"fidelity report {report.pk} was replaced by a newer attempt")
    coverage = result.get("coverage") or {}
    report.verdict = result["verdict"]
    report.verdict_reasons = result.get("verdict_reasons") or []
    report.closed_failure_violations = int(result.get("closed_failure_violations") or 0)
    report.coverage = coverage
    report.protocol_warnings = result.get("protocol_warnings") or []
    report.options = {**report.options, **(result.get("options") or {})}
    report.mode = result.get("mode") or report.mode
    report.tokenizers = tokenizers
    report.mask_export = masks
    report.calls_total = (coverage.get("calls") or {}).get("total") or 0
    report.policy_tokens = coverage.get("policy_tokens") or 0
    report.verifiable_policy_tokens = coverage.get("verifiable_policy_tokens") or 0
    report.verifiable_fraction = coverage.get("verifiable_fraction")
    report.spurious_call_rate = (coverage.get("calls") or {}).get("spurious_call_rate")
    report.state = FidelityReport.State.COMPLETE
    report.completed_at = timezone.now()
    report.save()
    attest_fidelity_report(report)  # signed + logged in this transaction; a failure rolls it back, fails the job
    return report
