"""Fidelity pages: a run's audit (verdict, closed-failure check, coverage figures), a call drill-down (tokens coloured
by span status), and the project's registered tokenizers (list and upload form)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from rest_framework.exceptions import APIException

from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.accounts.throttling import charge_work_budget
from audit_portal.core.pages import page_context, project_page
from audit_portal.fidelity import figures, selectors, services, tokens
from audit_portal.jobs import selectors as job_selectors
from audit_portal.runs import selectors as run_selectors


def _legend(codes: list[str], used: set[str]) -> list[dict]:
    return [{"code": c, "colour": figures.reason_colour(c, codes)} for c in codes if c in used]


@project_page
def run_fidelity(request, slug, pk):
    ctx = page_context(request)
    principal = ctx["principal"]
    run = get_scoped_or_404(run_selectors.runs_for(principal), request.project, pk=pk)
    reports = selectors.reports_for(principal).filter(run=run)
    chosen = request.GET.get("report")
    report = (reports.filter(pk=chosen).first() if chosen and chosen.isdigit() else None) or reports.first()
    pending = (
        job_selectors.jobs_for(principal, ctx["project"])
        .filter(kind="fidelity_audit", subject_kind="upload", subject_id__in=run.uploads.values("pk"))
        .exclude(state="succeeded")[:5]
    )
    ctx.update(run=run, reports=reports, report=report, audit_jobs=pending)
    if report is not None:
        codes = selectors.reason_codes()
        verdict, reason = request.GET.get("verdict") or None, request.GET.get("reason") or None
        try:
            listed = (
                selectors.calls(report, verdict=verdict, reason=reason)[:100]
                if (verdict or reason)
                else selectors.flagged_calls(report)
            )
        except APIException as exc:  # a bad filter from the form: say so, show the default list
            messages.error(request, str(exc.detail))
            verdict = reason = None
            listed = selectors.flagged_calls(report)
        cov = report.coverage
        ctx.update(
            figures=figures.all_figures(report, codes),
            codes=codes,
            calls=listed,
            verdict_filter=verdict,
            reason_filter=reason,
            cov=cov,
            closed=cov.get("closed_failure") or {},
            ledger=cov.get("background_ledger") or {},
            drift=cov.get("drift") or {},
            align=cov.get("logprob_alignment") or {},
            cert=cov.get("certificates") or {},
            steps=sorted(
                ((cov.get("breakdowns") or {}).get("step") or {}).items(),
                key=lambda kv: int(kv[0]) if kv[0].lstrip("-").isdigit() else 1 << 62,
            )[:50],
            other_breakdowns={k: v for k, v in (cov.get("breakdowns") or {}).items() if k != "step"},
            legend=_legend(codes, set(cov.get("excluded_tokens_by_primary_reason") or {})),
            violating_calls=report.calls.filter(closed_failure_violations__gt=0).order_by("line")[:10],
        )
    return render(request, "fidelity/run.html", ctx)


@project_page
def call_page(request, slug, pk):
    ctx = page_context(request)
    call = get_scoped_or_404(
        selectors.calls_for(request.principal), noun="call", pk=pk, report__project=request.project
    )
    codes = selectors.reason_codes()
    try:
        view = tokens.call_tokens(call, selectors.read_record(call))
        record_error = None
    except selectors.RecordUnavailable as exc:
        view, record_error = None, str(exc)
    used = {r for _, _, reasons in call.spans for r in reasons}
    ctx.update(
        call=call,
        report=call.report,
        run=call.report.run,
        view=view,
        record_error=record_error,
        legend=_legend(codes, used),
        colours={c: figures.reason_colour(c, codes) for c in codes},
        rules=sorted((call.rules or {}).items()),
        spans=call.span_dicts(),
    )
    return render(request, "fidelity/call.html", ctx)


@project_page
def tokenizers_page(request, slug):
    ctx = page_context(request)
    project = ctx["project"]
    if request.method == "POST":
        if not ctx["can_submit"]:
            messages.error(request, "Registering a tokenizer needs the submit role.")
            return redirect("fidelity:tokenizers", slug=slug)
        uploaded = request.FILES.get("file")
        try:
            charge_work_budget(request)
            if uploaded is None:
                messages.error(request, "Choose a tokenizer.json file.")
            else:
                tok, created = services.register_uploaded_tokenizer(
                    project=project,
                    uploaded=uploaded,
                    name=request.POST.get("name"),
                    uploaded_by=ctx["principal"].label,
                )
                if created:
                    messages.success(request, f"Registered {tok.name} (sha256 {tok.sha256[:12]}…).")
                else:
                    messages.success(request, f"Already registered as {tok.name} (sha256 {tok.sha256[:12]}…).")
        except APIException as exc:
            messages.error(request, str(exc.detail))
        finally:
            for f in [f for key in request.FILES for f in request.FILES.getlist(key)]:
                if hasattr(f, "discard"):
                    f.discard()
        return redirect("fidelity:tokenizers", slug=slug)
    ctx["tokenizers"] = selectors.tokenizers_for(ctx["principal"], project)
    return render(request, "fidelity/tokenizers.html", ctx)
