"""Pages: the contract suite (global), and per project the results matrix, the submission form, one
submission filling in live, and the diff of two submissions."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from rest_framework.exceptions import APIException

from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.accounts.throttling import charge_work_budget
from audit_portal.core.pages import page_context, project_page, signed_in_page
from audit_portal.kernels import contract_view, selectors, services
from audit_portal.kernels.submission_input import KERNEL_MODULE_MAX_BYTES
from audit_portal.kernels.api import badge_response, public_badge_payload
from audit_portal.kernels.models import Device
from workers.contracts.deployment import BOOLEAN, DEPLOYMENT_FLAGS, FAMILIES, LEVELS

PART_TITLES = [
    ("identifier", "1 · Identifier"),
    ("scope", "2 · Scope"),
    ("precondition", "3 · Precondition"),
    ("postcondition", "4 · Postcondition"),
    ("tolerance", "5 · Tolerance"),
    ("reference_oracle", "6 · Reference oracle"),
    ("measurement_protocol", "7 · Measurement protocol"),
    ("violation_signature", "8 · Violation signature"),
]


def _contract_rows(contracts) -> list[dict]:
    return [
        {
            "contract": c,
            "calibration": selectors.calibration_state(c),
            "versions": len(selectors.contract_versions(c.contract_id)),
        }
        for c in contracts
    ]


@signed_in_page
def contract_list(request):
    rows = _contract_rows(selectors.latest_contracts())
    declared_rows = _contract_rows(selectors.latest_contracts(declared=True))
    calibrated = sum(1 for r in rows if r["calibration"]["status"] == "calibrated")
    ctx = page_context(request, rows=rows, declared_rows=declared_rows, calibrated=calibrated)
    return render(request, "kernels/contracts.html", ctx)


@signed_in_page
def contract_detail(request, contract_id):
    contract = selectors.get_contract(contract_id, request.GET.get("version") or None)
    spec = selectors.spec_in_source_order(contract)
    parts = contract_view.readable_parts(spec, PART_TITLES)
    state = selectors.calibration_state(contract)
    ctx = page_context(
        request,
        contract=contract,
        spec=spec,
        parts=parts,
        extras=contract_view.readable_extras(spec),
        calibration=state,
        calibration_rows=selectors.calibration_rows(state["calibration"]),
        versions=selectors.contract_versions(contract.contract_id),
        latest=selectors.get_contract(contract.contract_id),
    )
    return render(request, "kernels/contract.html", ctx)


@project_page
def matrix_page(request, slug):
    ctx = page_context(request)
    ctx["matrix"] = selectors.matrix(ctx["principal"], ctx["project"])
    submissions = list(selectors.submissions_for(ctx["principal"], ctx["project"]).prefetch_related("verdicts")[:20])
    for s in submissions:  # the badge says what the kernel got, not only that its job ended
        s.outcome = selectors.column_outcome(s.state, selectors.verdict_counts(s.verdicts.all()))
    ctx["submissions"] = submissions
    return render(request, "kernels/matrix.html", ctx)


@project_page
def submit_page(request, slug):
    ctx = page_context(request)
    ctx.update(
        contracts=selectors.latest_contracts(),
        declared_contracts=selectors.latest_contracts(declared=True),
        devices=Device.choices,
        max_bytes=KERNEL_MODULE_MAX_BYTES,
        form=request.POST,
        boolean_flags=[f for f, allowed in DEPLOYMENT_FLAGS.items() if allowed is BOOLEAN],
        chosen_flags=request.POST.getlist("flag"),
        precisions=DEPLOYMENT_FLAGS["float32_matmul_precision"],
        target_choices=[(f, request.POST.get(f"target_{f}", "")) for f in FAMILIES],
        levels=list(LEVELS),
    )
    if request.method == "POST":
        if not ctx["can_submit"]:
            messages.error(request, "Submitting kernels needs the submit role (owner or member).")
            return redirect("kernels:matrix", slug=slug)
        from audit_portal.kernels.api import submit_from_request

        form = request.POST.copy()
        if form.get("source") == "upload":
            form["impl"] = ""
        elif "module" in request.FILES:
            request.FILES.pop("module")  # the form sends both inputs; the chosen source decides
        form.setlist("contracts", [",".join(request.POST.getlist("contracts"))])
        flags = {name: True for name in request.POST.getlist("flag")}
        if request.POST.get("flag_float32_matmul_precision"):
            flags["float32_matmul_precision"] = request.POST["flag_float32_matmul_precision"]
        target = {f: request.POST[f"target_{f}"] for f in FAMILIES if request.POST.get(f"target_{f}")}
        form["deployment_flags"] = json.dumps(flags) if flags else ""
        form["target"] = json.dumps(target) if target else ""
        request.POST = form
        try:
            charge_work_budget(request)
            submission = submit_from_request(request, ctx["project"], ctx["principal"])
        except APIException as exc:
            ctx["error"] = {
                "code": getattr(exc.detail, "code", None) or exc.default_code,
                "message": str(exc.detail),
                "detail": getattr(exc, "extra", None) or {},
            }
            return render(request, "kernels/submit.html", ctx, status=exc.status_code)
        return redirect("kernels:submission", slug=slug, pk=submission.pk)
    return render(request, "kernels/submit.html", ctx)


@project_page
def submission_page(request, slug, pk):
    ctx = page_context(request)
    submission = get_scoped_or_404(
        selectors.submissions_for(request.principal), request.project, noun="kernel submission", pk=pk
    )
    verdicts = {v.contract_id: v for v in selectors.verdicts_of(submission)}
    rows = [{"entry": e, "verdict": verdicts.get(e["contract"])} for e in submission.plan]
    others = selectors.submissions_for(ctx["principal"], ctx["project"]).exclude(pk=submission.pk)[:20]
    ctx.update(
        submission=submission,
        rows=rows,
        job=submission.job,
        others=others,
        outcome=selectors.column_outcome(submission.state, selectors.verdict_counts(verdicts.values())),
        history=selectors.implementation_history(ctx["principal"], submission),
        status=selectors.ci_status(ctx["principal"], submission.implementation, submission.device),
        public_badge=public_badge_payload(request, submission.implementation),
    )
    return render(request, "kernels/submission.html", ctx)


@project_page
@require_POST
def badge_action(request, slug, pk):
    """Publish (or renew) / unpublish an implementation's public badge from its submission page."""
    ctx = page_context(request)
    implementation = get_scoped_or_404(selectors.implementations_for(request.principal), request.project, pk=pk)
    if not ctx["can_submit"]:
        messages.error(request, "Publishing a badge needs the submit role (owner or member).")
        return redirect("kernels:matrix", slug=slug)
    action = request.POST.get("action")
    if action == "publish":
        services.publish_badge(implementation)
        messages.success(request, "Public badge URL created; any earlier URL of this implementation no longer works.")
    elif action == "unpublish":
        services.unpublish_badge(implementation)
        messages.success(request, "Public badge unpublished: its URL now answers 404.")
    else:
        messages.error(request, "Unknown badge action.")
    latest = selectors.latest_submission(ctx["principal"], implementation)
    if latest is None:
        return redirect("kernels:matrix", slug=slug)
    return redirect(reverse("kernels:submission", args=[slug, latest.pk]) + "#public-badge")


def public_badge(request, token):
    """The badge anyone may fetch with the token (no sign-in): state and grade of the latest submission only."""
    implementation = selectors.implementation_for_badge(token)
    return badge_response(selectors.public_badge_status(implementation, request.GET.get("device")))


@project_page
def diff_page(request, slug):
    ctx = page_context(request)
    a, b = request.GET.get("a", ""), request.GET.get("b", "")
    if not (a.isdigit() and b.isdigit()):
        messages.error(request, "Choose two submissions to compare.")
        return redirect("kernels:matrix", slug=slug)
    result = selectors.diff(ctx["principal"], int(a), int(b))
    subs = {
        s.pk: s for s in selectors.submissions_for(ctx["principal"], ctx["project"]).filter(pk__in=[int(a), int(b)])
    }
    if len(subs) != len({int(a), int(b)}):
        raise Http404
    ctx.update(diff=result, a=subs[int(a)], b=subs[int(b)])
    return render(request, "kernels/diff.html", ctx)
