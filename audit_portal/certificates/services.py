"""Writes for certificates. A certification job calls ``begin`` (replacing any earlier, possibly partial,
certificate of the same upload: retries are idempotent), streams sequence summaries through ``add_sequences``
(bulk inserts, chunk by chunk), then ``complete`` with the engine's run certificate."""

from __future__ import annotations

import math

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit_portal.attestations.services import attest_run_certificate
from audit_portal.certificates.models import CertificateChunk, RunCertificate, SequenceSummary, StepAggregate
from workers.certify.verdict import run_verdict
from workers.jsonsafe import finite_or_none

BATCH = 5000
EPS_BINS = 50  # ε̂ histogram over [0, 1]
DELTA_DECADES = (-8, 1)  # δ̂ histogram over log10 in this range, 4 bins a decade


class Histograms:
    """ε̂ and δ̂ distributions accumulated as sequences stream past (never all held in memory)."""

    def __init__(self):
        self.eps = [0] * EPS_BINS
        lo, hi = DELTA_DECADES
        self.delta = [0] * ((hi - lo) * 4)
        self.delta_unbounded = 0

    def add(self, row: dict) -> None:
        eps = finite_or_none(row.get("eps_hat"))
        if eps is not None:
            self.eps[min(EPS_BINS - 1, max(0, int(eps * EPS_BINS)))] += 1
        if row.get("status") == "DATA_ERROR":
            return
        delta = finite_or_none(row.get("delta_hat"))
        if delta is None:
            self.delta_unbounded += 1
        else:
            lo, hi = DELTA_DECADES
            pos = (math.log10(max(delta, 10.0**lo)) - lo) * 4
            self.delta[min(len(self.delta) - 1, max(0, int(pos)))] += 1

    def merge(self, counts: dict) -> "Histograms":
        """Add the counts of another accumulator's ``as_dict()`` (a certified chunk's, CertificateChunk)."""
        if counts:
            self.eps = [a + b for a, b in zip(self.eps, counts["eps"]["counts"])]
            self.delta = [a + b for a, b in zip(self.delta, counts["delta"]["counts"])]
            self.delta_unbounded += counts["delta"]["unbounded"]
        return self

    def as_dict(self) -> dict:
        lo, hi = DELTA_DECADES
        return {
            "eps": {"edges": [i / EPS_BINS for i in range(EPS_BINS + 1)], "counts": self.eps},
            "delta": {
                "log10_edges": [lo + i / 4 for i in range((hi - lo) * 4 + 1)],
                "counts": self.delta,
                "unbounded": self.delta_unbounded,
            },
        }


def begin(upload, options: dict) -> RunCertificate:
    with transaction.atomic():
        RunCertificate.objects.filter(upload=upload).delete()
        return RunCertificate.objects.create(project=upload.project, run=upload.run, upload=upload, options=options)


def add_sequences(certificate: RunCertificate, rows: list[dict], histograms: Histograms | None = None) -> None:
    objs = []
    for row in rows:
        if histograms is not None:
            histograms.add(row)
        objs.append(
            SequenceSummary(
                certificate=certificate,
                call_id=(row.get("call_id") or "")[:200],
                trajectory_id=(row.get("trajectory_id") or "")[:200],
                step=row.get("step"),
                line=row["line"],
                length=row.get("length"),
                status=row["status"],
                accept=bool(row.get("accept")),
                eps_hat=finite_or_none(row.get("eps_hat")),
                delta_hat=finite_or_none(row.get("delta_hat")),
                tv_lo_max=finite_or_none(row.get("tv_lo_max")),
                mean_k3=finite_or_none(row.get("mean_k3")),
                max_k2=finite_or_none(row.get("max_k2")),
                a_y=finite_or_none(row.get("A_y")),
                reason=row.get("reason") or "",
            )
        )
    SequenceSummary.objects.bulk_create(objs, batch_size=BATCH)


@transaction.atomic
def complete(certificate: RunCertificate, result: dict, histograms: Histograms | None = None) -> RunCertificate:
    summary = result["summary"]
    bounds = result.get("bounds") or {}
    StepAggregate.objects.filter(certificate=certificate).delete()
    StepAggregate.objects.bulk_create(
        [
            StepAggregate(
                certificate=certificate,
                step=s.get("step"),
                sequences=s["sequences"],
                tokens=s["tokens"],
                accepted=s["accepted"],
                acceptance_rate=s.get("acceptance_rate"),
                eps_hat_max=s.get("eps_hat_max"),
                eps_hat_mean=s.get("eps_hat_mean"),
                delta_hat=s.get("delta_hat"),
                mean_k3=s.get("mean_k3"),
                status_counts=s.get("status_counts") or {},
                metrics=s.get("metrics") or {},
            )
            for s in result.get("steps", [])
        ],
        batch_size=BATCH,
    )
    certificate.summary = summary
    certificate.bounds = bounds
    certificate.budget = result.get("budget") or {}
    certificate.length_buckets = result.get("length_buckets") or []
    certificate.errors = result.get("errors") or []
    certificate.caveats = result.get("caveats") or []
    certificate.options = result.get("options") or certificate.options
    certificate.histograms = histograms.as_dict() if histograms else {}
    certificate.tokens = summary.get("tokens") or 0
    certificate.sequences = summary.get("sequences") or 0
    certificate.acceptance_rate = summary.get("acceptance_rate")
    certificate.eps_hat = summary.get("eps_hat")
    certificate.delta_hat = summary.get("delta_hat")
    certificate.best_bound = bounds.get("best")
    certificate.best_bound_id = bounds.get("argmin") or ""
    certificate.data_errors = summary.get("data_errors") or 0
    verdict = run_verdict(summary, bounds, certificate.options)
    certificate.verdict, certificate.verdict_detail = verdict.code, verdict.as_dict()
    certificate.state = RunCertificate.State.COMPLETE
    certificate.completed_at = timezone.now()
    certificate.save()
    attest_run_certificate(certificate)  # signed + logged in this transaction; a failure rolls it back, fails the job
    return certificate


# ---- one upload certified in chunks by several workers (issue #18; pipelines/certificates.py) --------------
def begin_chunked(upload, options: dict, job) -> RunCertificate:
    """The certificate the chunks of ``job`` fill: the one its stored chunks already belong to when the job is
    retried (their work is kept), else a fresh one (:func:`begin`)."""
    done = CertificateChunk.objects.filter(job=job).select_related("certificate").first()
    if done is not None:
        return done.certificate
    return begin(upload, options)


def chunks_done(job) -> set[int]:
    return set(CertificateChunk.objects.filter(job=job).values_list("index", flat=True))


def store_chunk(
    job, certificate: RunCertificate, index: int, partial: dict, rows: list[dict], worker: str = ""
) -> bool:
    """Store one certified chunk and its sequence rows in one transaction; False (and nothing written) when this
    chunk is already stored — a redelivered or duplicated task — so no sequence is ever counted twice."""
    histograms = Histograms()
    for row in rows:
        histograms.add(row)
    try:
        with transaction.atomic():
            # the unique row first: a concurrent duplicate waits here and then fails before inserting its rows
            CertificateChunk.objects.create(
                job=job,
                certificate=certificate,
                index=index,
                partial=partial,
                histograms=histograms.as_dict(),
                sequences=len(rows),
                tokens=partial.get("tokens", 0),
                worker=worker[:200],
            )
            add_sequences(certificate, rows)
    except IntegrityError:
        return False
    return True


def stored_chunks(job) -> list[CertificateChunk]:
    return list(CertificateChunk.objects.filter(job=job).order_by("index"))
