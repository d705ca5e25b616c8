"""The alerts page: a project's rules with their state per run, the events they raised, the webhook delivery log,
and (for the submit role) the form that adds a rule. The new rule's signing secret is shown once, on the answer to
the form."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from audit_portal.alerts import rules, selectors, services
from audit_portal.core.pages import page_context, project_page, show_once, take_shown_once


@project_page
def alerts_page(request, slug):
    ctx = page_context(request)
    ctx.update(kinds=list(rules.KINDS.items()), form={"window": 5})
    status = 200
    if request.method == "POST":
        if not ctx["can_submit"]:
            messages.error(request, "Adding an alert rule needs the submit role (owner or member).")
            return redirect("alerts:page", slug=slug)
        form = {k: request.POST.get(k, "") for k in ("name", "kind", "threshold", "window", "webhook_url")}
        try:
            rule = services.create_rule(
                project=ctx["project"], data={**form, "enabled": True}, created_by=ctx["principal"].label
            )
        except services.InvalidAlertRule as exc:
            ctx.update(form=form, error={"message": str(exc.detail), "field": exc.extra.get("field")})
            status = 400
        else:  # its secret is on the next page only (POST-redirect-GET: a reload adds nothing)
            show_once(request, "alert-rule-created", rule.pk)
            return redirect("alerts:page", slug=slug)
    else:
        ctx.update(_shown_once(request, ctx))
    return _render(request, ctx, status)


def _shown_once(request, ctx) -> dict:
    """The rule just added or whose secret was just rotated, on the first GET after that POST."""
    out = {}
    for key, name in (("alert-rule-created", "created"), ("alert-rule-rotated", "rotated")):
        pk = take_shown_once(request, key)
        if pk is not None:
            out[name] = selectors.rules_for(ctx["principal"], ctx["project"]).filter(pk=pk).first()
    return out


def _render(request, ctx, status=200):
    project = ctx["project"]
    rule_rows = [
        {"rule": r, "condition": rules.KINDS[r.kind], "states": list(selectors.states_of(r, 10))}
        for r in selectors.rules_for(ctx["principal"], project)
    ]
    ctx.update(rule_rows=rule_rows, events=selectors.events_for(project), deliveries=selectors.deliveries_for(project))
    return render(request, "alerts/page.html", ctx, status=status)


def _rule_to_change(request, slug, pk, action: str):
    """The page context and the rule, for a caller with the submit role; the rule is None for anyone else (told why
    on the page they return to)."""
    ctx = page_context(request)
    rule = selectors.get_rule(ctx["principal"], pk, ctx["project"])
    if not ctx["can_submit"]:
        messages.error(request, f"{action} an alert rule needs the submit role (owner or member).")
        return ctx, None
    return ctx, rule


@project_page
@require_POST
def edit_rule(request, slug, pk):
    """The rule's edit form, or its disable/enable button: the fields posted are changed, the others kept."""
    _, rule = _rule_to_change(request, slug, pk, "Changing")
    if rule is not None:
        try:
            rule = services.update_rule(rule, {k: request.POST[k] for k in services.EDITABLE if k in request.POST})
        except services.InvalidAlertRule as exc:
            messages.error(request, f"Rule “{rule.name}” not changed: {exc.detail}")
        else:
            messages.success(request, f"Alert rule “{rule.name}” saved{'' if rule.enabled else ' (disabled)'}.")
    return redirect("alerts:page", slug=slug)


@project_page
@require_POST
def rotate_secret(request, slug, pk):
    """A new webhook signing secret, shown on this answer only (never put in a message: those may live in a cookie)."""
    _, rule = _rule_to_change(request, slug, pk, "Rotating the secret of")
    if rule is not None:
        show_once(request, "alert-rule-rotated", services.rotate_secret(rule).pk)
    return redirect("alerts:page", slug=slug)


@project_page
@require_POST
def delete_rule(request, slug, pk):
    _, rule = _rule_to_change(request, slug, pk, "Deleting")
    if rule is not None:
        services.delete_rule(rule)
        messages.success(request, f"Alert rule “{rule.name}” deleted.")
    return redirect("alerts:page", slug=slug)
