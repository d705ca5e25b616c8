"""The alerts page: a project's rules with their state per run, the events they raised, the webhook delivery log,
and (for the submit role) the form that adds a rule. The new rule's signing secret is shown once, on the answer to
the form."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from audit_portal.alerts import rules, selectors, services
from audit_portal.core.pages import page_context


@login_required
def alerts_page(request, slug):
    ctx = page_context(request, slug)
    ctx.update(kinds=list(rules.KINDS.items()), form={"window": 5})
    status = 200
    if request.method == "POST":
        if not ctx["can_submit"]:
            messages.error(request, "Adding an alert rule needs the submit role (owner or member).")
            return redirect("alerts:page", slug=slug)
        form = {k: request.POST.get(k, "") for k in ("name", "kind", "threshold", "window", "webhook_url")}
        try:
            rule = services.create_rule(project=ctx["project"], data={**form, "enabled": True},
                                        created_by=ctx["principal"].label)
        except services.InvalidAlertRule as exc:
            ctx.update(form=form, error={"message": str(exc.detail), "field": exc.extra.get("field")})
            status = 400
        else:
            ctx["created"] = rule  # its secret is on this answer only
    project = ctx["project"]
    rule_rows = [{"rule": r, "condition": rules.KINDS[r.kind], "states": list(selectors.states_of(r, 10))}
                 for r in selectors.rules_for(ctx["principal"], project)]
    ctx.update(rule_rows=rule_rows, events=selectors.events_for(project), deliveries=selectors.deliveries_for(project))
    return render(request, "alerts/page.html", ctx, status=status)


@login_required
@require_POST
def delete_rule(request, slug, pk):
    ctx = page_context(request, slug)
    rule = selectors.get_rule(ctx["principal"], pk, ctx["project"])
    if not ctx["can_submit"]:
        messages.error(request, "Deleting an alert rule needs the submit role (owner or member).")
    else:
        services.delete_rule(rule)
        messages.success(request, f"Alert rule “{rule.name}” deleted.")
    return redirect("alerts:page", slug=slug)
