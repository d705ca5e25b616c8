"""What a job's state means to a person, and what it produced.

A job that ran to the end is ``succeeded`` even when what it found is bad news (an upload that is not a valid run
log): the state says the work finished, the outcome says what came of it. ``outcome(job)`` is the one place that
turns (kind, state, result) into plain words and a badge colour; the pages, the websocket events and the REST API
all use it, so the same job never reads "succeeded" in one place and "invalid" in another.

``product_url(job)`` resolves what a finished job made (a certificate, a fidelity report, a kernel submission's
results, a training audit, the upload it validated) to the page that shows it, through the resolvers each app
registers (:func:`register_product_page`); ``/jobs/<id>/result/`` redirects there, so a live event needs only the
job's id to link to its result.
"""

from __future__ import annotations

from collections.abc import Callable

from django.urls import reverse

from workers.certify.verdict import LABELS as VERDICT_LABELS

KERNEL_FAILING = frozenset({"FAIL", "TIMEOUT", "CRASH", "REFUSED"})  # a kernel verdict that counts against it
VERDICT_TONES = {
    "certified": "valid",
    "over_budget": "duplicate",
    "vacuous": "duplicate",
    "data_errors": "invalid",
    "not_verifiable": "invalid",
}

# kind -> what a successful job of that kind produced, in words
PRODUCTS = {
    "validate_upload": "validation report",
    "certify_upload": "certificate",
    "fidelity_audit": "fidelity report",
    "routing_audit": "routing audit",
    "kernel_conformance": "conformance results",
    "kernel_signature": "signed conformance result",
    "training_step_audit": "training audit",
    "calibrate_contracts": "contract calibration",
}


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# a job that has not finished, or finished without a result to read: its state alone says it (text, tone)
UNFINISHED = {
    "queued": ("queued", "queued"),  # waiting for a worker
    "running": ("running", "running"),
    "cancelled": ("cancelled", "cancelled"),
    "failed": ("failed", "invalid"),
}


def outcome(kind: str, state: str, result: dict | None, error: str = "") -> dict:
    """``{"text", "tone"}``: the state in plain words (``finished: invalid (3 errors)``) and the badge colour
    (one of the stage/state badge classes: ``valid``, ``invalid``, ``running``, ``queued``, ``cancelled``)."""
    if state in UNFINISHED:
        text, tone = UNFINISHED[state]
        return {"text": text, "tone": tone}
    if state != "succeeded":
        return {"text": state, "tone": "queued"}
    finished = _FINISHED_BY_KIND.get(kind)
    return (finished and finished(result or {})) or {"text": "finished", "tone": "valid"}


def _finished_validation(result: dict) -> dict | None:
    stage = result.get("stage")
    if stage == "invalid":
        return {
            "text": f"finished: invalid ({_plural(int(result.get('error_count') or 0), 'error')})",
            "tone": "invalid",
        }
    if stage == "valid":
        records = result.get("records")
        return {
            "text": "finished: valid" + (f" ({_plural(int(records), 'record')})" if records else ""),
            "tone": "valid",
        }
    return None


def _finished_fidelity(result: dict) -> dict | None:
    if not result.get("verdict"):
        return None
    passed = result["verdict"] == "PASS"
    return {
        "text": "finished: " + ("audit passed" if passed else "audit failed"),
        "tone": "valid" if passed else "invalid",
    }


def _finished_routing(result: dict) -> dict | None:
    if not isinstance(result.get("replay"), dict):
        return None
    state = result["replay"].get("state")
    return {
        "text": f"finished: replay {state}" if state in ("PASS", "FAIL", "UNVERIFIABLE") else "finished",
        "tone": {"PASS": "valid", "FAIL": "invalid", "UNVERIFIABLE": "duplicate"}.get(state, "valid"),
    }


def _finished_conformance(result: dict) -> dict | None:
    if not isinstance(result.get("verdict_counts"), dict):
        return None
    # the job finished; what it found is the kernel's verdicts (a column of FAILs is not a green "finished")
    counts = {k: int(v) for k, v in result["verdict_counts"].items() if isinstance(v, int) and v > 0}
    total = sum(counts.values())
    failed = sum(n for k, n in counts.items() if k in KERNEL_FAILING)
    passed = counts.get("PASS", 0) + counts.get("QUALITY_WARNING", 0)
    if total == 0:
        return {"text": "finished: no contract measured", "tone": "duplicate"}
    if failed:
        return {"text": f"finished: {failed} of {total} contracts failed", "tone": "invalid"}
    if passed == total:
        return {"text": f"finished: all {total} contracts passed", "tone": "valid"}
    return {
        "text": f"finished: {passed} of {total} passed, the rest undecided or not applicable",
        "tone": "duplicate",
    }


def _finished_certification(result: dict) -> dict | None:
    if result.get("verdict") in VERDICT_LABELS:  # the run's verdict, not "finished"
        return {
            "text": "finished: " + VERDICT_LABELS[result["verdict"]].lower(),
            "tone": VERDICT_TONES.get(result["verdict"], "duplicate"),
        }
    if result.get("data_errors"):
        return {
            "text": f"finished ({_plural(int(result['data_errors']), 'sequence')} with data errors)",
            "tone": "duplicate",
        }
    return None


# kind -> what its succeeded job's result says, or None when the result says nothing beyond "finished"
_FINISHED_BY_KIND: dict[str, Callable[[dict], "dict | None"]] = {
    "validate_upload": _finished_validation,
    "fidelity_audit": _finished_fidelity,
    "routing_audit": _finished_routing,
    "kernel_conformance": _finished_conformance,
    "certify_upload": _finished_certification,
}


def job_outcome(job) -> dict:
    """``outcome`` of a Job row, plus the label and link of what it produced (succeeded jobs only)."""
    out = outcome(job.kind, job.state, job.result, job.error)
    if job.state == "succeeded" and job.kind in PRODUCTS:
        out.update(product=PRODUCTS[job.kind], product_url=reverse("dashboards:job_result", args=[job.pk]))
    return out


ProductPage = Callable[[object], "str | None"]
_PRODUCT_PAGES: dict[str, ProductPage] = {}
_SUBJECT_PAGES: dict[str, ProductPage] = {}


def register_product_page(*kinds: str, subject_kind: str | None = None):
    """Decorator for ``fn(job) -> url | None``: the page showing what a succeeded job of these kinds made, or
    (``subject_kind``) the page of its subject when its own product has none. The app that owns the product
    registers it from its ``AppConfig.ready``, so this module never imports the apps above it."""

    def decorate(fn: ProductPage) -> ProductPage:
        for kind in kinds:
            _PRODUCT_PAGES[kind] = fn
        if subject_kind is not None:
            _SUBJECT_PAGES[subject_kind] = fn
        return fn

    return decorate


def run_result_page(model, result_key: str, url_name: str) -> ProductPage:
    """A resolver for jobs whose result names a row shown on a run's page (``job.result[result_key]``: a
    certificate, a fidelity report): ``url_name`` for the project and the row's run, ``?<result_key>=<pk>``; None
    when the row is gone, in another project, or has no run."""

    def page(job):
        row = model.objects.filter(pk=(job.result or {}).get(result_key), project_id=job.project_id).first()
        if row is None or not row.run_id:
            return None
        return reverse(url_name, args=[job.project.slug, row.run_id]) + f"?{result_key}={row.pk}"

    return page


def product_url(job) -> str | None:
    """The page showing what ``job`` produced, or None (not finished, or nothing to show). The caller has already
    checked that the principal may read the job; every resolver names only objects of the job's project."""
    if job.state != "succeeded":
        return None
    for pages, key in ((_PRODUCT_PAGES, job.kind), (_SUBJECT_PAGES, job.subject_kind)):
        page = pages.get(key)
        url = page(job) if page is not None else None
        if url is not None:
            return url
    return None
