"""Training-audit pages: the project's audits with the submission form, and one audit (configuration, device
used, live progress while its job runs, then the figures and tables)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from rest_framework.exceptions import APIException

from audit_portal.accounts.throttling import charge_work_budget
from audit_portal.core.pages import page_context, project_page
from audit_portal.training import figures, selectors
from audit_portal.training.api import submit_from_request
from workers.training.config import DEFAULTS, DEVICES, LOSS_NAMES, OPTIMIZERS, PRECISIONS

NUMERICS_CHOICES = [*PRECISIONS, "bf16_autocast,sdpa", "bf16_autocast,extra_batch", "bf16_weights,sdpa,extra_batch"]
MODEL_FIELDS = (
    ("vocab", "vocabulary"),
    ("d_model", "width d"),
    ("n_layers", "layers"),
    ("n_heads", "heads"),
    ("max_len", "max length"),
    ("seed", "seed (weights, prompts)"),
)
BATCH_FIELDS = (
    ("batch", "sequences"),
    ("group", "samples per prompt"),
    ("prompt_len", "prompt tokens"),
    ("length", "response tokens"),
    ("topk", "K (top-K view)"),
    ("lr", "learning rate"),
    ("budget", "error budget"),
)


def _fields(form, pairs):
    return [{"name": name, "label": label, "value": form.get(name, DEFAULTS[name])} for name, label in pairs]


@project_page
def audit_list(request, slug):
    ctx = page_context(request)
    form = request.POST
    chosen = set(form.getlist("losses")) if form else set(LOSS_NAMES)
    ctx.update(
        devices=DEVICES,
        optimizers=OPTIMIZERS,
        numerics_choices=NUMERICS_CHOICES,
        form=form,
        model_fields=_fields(form, MODEL_FIELDS),
        batch_fields=_fields(form, BATCH_FIELDS),
        losses=[{"name": n, "checked": n in chosen} for n in LOSS_NAMES],
        numerics=form.get("numerics", DEFAULTS["numerics"]),
        device=form.get("device", DEFAULTS["device"]),
        optimizer=form.get("optimizer", DEFAULTS["optimizer"]),
    )
    if request.method == "POST":
        if not ctx["can_submit"]:
            messages.error(request, "Submitting a training audit needs the submit role (owner or member).")
            return redirect("training:list", slug=slug)
        try:
            charge_work_budget(request)
            audit = submit_from_request(request, ctx["project"], ctx["principal"])
        except APIException as exc:
            ctx["error"] = {
                "code": getattr(exc.detail, "code", None) or exc.default_code,
                "message": str(exc.detail),
                "field": (getattr(exc, "extra", None) or {}).get("field"),
            }
            ctx["audits"] = selectors.audits_for(ctx["principal"], ctx["project"])[:50]
            return render(request, "training/list.html", ctx, status=exc.status_code)
        return redirect("training:detail", slug=slug, pk=audit.pk)
    ctx["audits"] = selectors.audits_for(ctx["principal"], ctx["project"])[:50]
    return render(request, "training/list.html", ctx)


@project_page
def audit_detail(request, slug, pk):
    ctx = page_context(request)
    audit = selectors.get_audit(ctx["principal"], pk, ctx["project"])
    steps = [{"name": name, **row} for name, row in audit.ordered_steps()]
    ctx.update(
        audit=audit,
        job=audit.job,
        config=audit.config,
        figures=figures.all_figures(audit),
        steps=steps,
        views=list((audit.certificates or {}).items()),
        divergence=audit.divergence or {},
    )
    return render(request, "training/detail.html", ctx)
