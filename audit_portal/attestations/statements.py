"""The in-toto Statement of each kind of certificate, derived from what the database holds.

The same function builds the statement when the certificate is signed and when a page or the API checks that
the stored certificate still says what was signed (the ``record`` check), so any later change to a certificate
row — one digit of ε̂, one verdict — shows as a mismatch with the signed payload.
"""

from __future__ import annotations

from audit_portal.attestations.models import SubjectKind
from workers.verify import statement as st


def _iso(dt):
    return dt.isoformat() if dt else None


def _upload_subject(upload) -> dict:
    return st.subject(upload.original_name or f"upload-{upload.pk}", upload.sha256)


def _upload_ref(upload) -> dict:
    return {
        "id": upload.pk,
        "name": upload.original_name,
        "sha256": upload.sha256,
        "size_bytes": upload.size_bytes,
        "compression": upload.compression,
        "format": upload.format,
    }


def run_certificate(cert) -> dict:
    steps = [
        {
            "step": s.step,
            "sequences": s.sequences,
            "tokens": s.tokens,
            "accepted": s.accepted,
            "acceptance_rate": s.acceptance_rate,
            "eps_hat_max": s.eps_hat_max,
            "eps_hat_mean": s.eps_hat_mean,
            "delta_hat": s.delta_hat,
            "mean_k3": s.mean_k3,
            "status_counts": s.status_counts,
        }
        for s in cert.steps.order_by("step", "id")
    ]
    predicate = {
        "certificate": {
            "id": cert.pk,
            "project": cert.project.slug,
            "run": cert.run.name if cert.run else None,
            "upload": _upload_ref(cert.upload),
            "completed_at": _iso(cert.completed_at),
        },
        "options": cert.options,
        "summary": cert.summary,
        "bounds": cert.bounds,
        "budget": cert.budget,
        "length_buckets": cert.length_buckets,
        "histograms": cert.histograms,
        "errors": cert.errors,
        "caveats": cert.caveats,
        "steps": steps,
    }
    return st.statement([_upload_subject(cert.upload)], st.RUN_CERTIFICATE_PREDICATE, predicate)


def fidelity_report(report) -> dict:
    predicate = {
        "report": {
            "id": report.pk,
            "project": report.project.slug,
            "run": report.run.name if report.run else None,
            "upload": _upload_ref(report.upload),
            "completed_at": _iso(report.completed_at),
        },
        "mode": report.mode,
        "verdict": report.verdict,
        "verdict_reasons": report.verdict_reasons,
        "closed_failure_violations": report.closed_failure_violations,
        "coverage": report.coverage,
        "protocol_warnings": report.protocol_warnings,
        "options": report.options,
        "tokenizers": report.tokenizers,
        "mask_export": {k: v for k, v in (report.mask_export or {}).items() if k in ("calls", "tokens_on")},
    }
    return st.statement([_upload_subject(report.upload)], st.FIDELITY_REPORT_PREDICATE, predicate)


WARNED_VERDICTS = ("QUALITY_WARNING", "NOT_APPLICABLE")


def kernel_submission(submission) -> dict:
    """in-toto Test Result v0.1: PASS → passedTests; QUALITY_WARNING and NOT_APPLICABLE → warnedTests; every
    other verdict → failedTests. ``result`` is FAILED if any failed, else WARNED if any warned, else PASSED."""
    impl = submission.implementation
    verdicts = list(submission.verdicts.select_related("contract").order_by("contract__contract_id", "id"))
    names = {"passed": [], "warned": [], "failed": []}
    for v in verdicts:
        name = f"{v.contract.contract_id}@{v.contract.version}"
        bucket = "passed" if v.verdict == "PASS" else "warned" if v.verdict in WARNED_VERDICTS else "failed"
        names[bucket].append(name)
    result = "FAILED" if names["failed"] or not verdicts else ("WARNED" if names["warned"] else "PASSED")
    if impl.code_sha256:
        subject, digest_of = st.subject(impl.original_filename or "module.py", impl.code_sha256), "uploaded module"
    else:
        code = sorted({v.impl_hash for v in verdicts if st.SHA256_RE.match(v.impl_hash or "")})
        if len(code) == 1:
            subject, digest_of = st.subject(impl.import_path, code[0]), "source file of the import path"
        else:  # the harness reported no (or several) source digests: the reference itself is what was tested
            subject = st.subject(f"reference:{impl.import_path}", impl.fingerprint)
            digest_of = "implementation reference"
    predicate = {
        "result": result,
        "configuration": [
            {"name": f"{v.contract.contract_id}@{v.contract.version}", "digest": {"sha256": v.contract.sha256}}
            for v in verdicts
        ],
        "passedTests": names["passed"],
        "warnedTests": names["warned"],
        "failedTests": names["failed"],
        "submission": {
            "id": submission.pk,
            "project": submission.project.slug,
            "implementation": impl.name,
            "reference": impl.reference,
            "subject_digest_of": digest_of,
            "device": submission.device,
            "finished_at": _iso(submission.finished_at),
            "environment": submission.environment,
        },
        "verdicts": [
            {
                "contract": f"{v.contract.contract_id}@{v.contract.version}",
                "class": v.contract_class,
                "verdict": v.verdict,
                "statistic_name": v.statistic_name,
                "statistic": v.statistic,
                "bound": v.bound,
                "margin": "Infinity" if v.margin_infinite else v.margin,
                "assurance_level": v.assurance_level,
                "measurements": v.measurements,
                "reason": v.reason,
            }
            for v in verdicts
        ],
        "grade": submission.grade,
        # how the candidate was contained while it was measured ("none": an operator allowed unisolated runs)
        "isolation": submission.isolation,
    }
    return st.statement([subject], st.TEST_RESULT_PREDICATE, predicate)


BUILDERS = {
    SubjectKind.RUN_CERTIFICATE: run_certificate,
    SubjectKind.FIDELITY_REPORT: fidelity_report,
    SubjectKind.KERNEL_SUBMISSION: kernel_submission,
}
