"""Server-rendered pages. Reads go through the scoped selectors; writes through services."""

from __future__ import annotations

from urllib.parse import urlencode

import orjson
from django.conf import settings
from django.contrib import messages
from django.db.models import Count, Q, Sum
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from audit_portal.core.api_errors import json_error
from audit_portal.core.pages import page_context, paginate, project_page, show_once, signed_in_page, take_shown_once
from audit_portal.dashboards import saved_views, tables
from audit_portal.accounts import selectors as account_selectors
from audit_portal.accounts import services as account_services
from audit_portal.accounts.models import Scope
from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.certificates import figures as certificate_figures
from audit_portal.certificates import selectors as certificate_selectors
from audit_portal.jobs import outcomes as job_outcomes
from audit_portal.jobs import selectors as job_selectors
from audit_portal.alerts import selectors as alert_selectors
from audit_portal.live import selectors as live_selectors
from audit_portal.runs import selectors as run_selectors
from workers.certify.verdict import LABELS as VERDICT_LABELS


@signed_in_page
def home(request):
    ctx = page_context(request)
    projects = list(ctx["projects"])
    if len(projects) == 1:
        return redirect("dashboards:project", slug=projects[0].slug)
    return render(request, "dashboards/home.html", ctx)


@project_page
def project_dashboard(request, slug):
    ctx = page_context(request)
    project = ctx["project"]
    uploads = run_selectors.uploads_for(ctx["principal"], project)
    stats = uploads.aggregate(
        total=Count("id", filter=~Q(stage="duplicate")),
        valid=Count("id", filter=Q(stage="valid")),
        invalid=Count("id", filter=Q(stage="invalid")),
        bytes=Sum("size_bytes", filter=~Q(stage="duplicate")),
    )
    ctx.update(
        stats=stats,
        uploads=uploads[:8],
        runs=run_selectors.runs_for(ctx["principal"], project)[:8],
        jobs=job_selectors.jobs_for(ctx["principal"], project)[:15],
    )
    return render(request, "dashboards/project.html", ctx)


UPLOADS_PER_PAGE = 50


@project_page
def uploads_page(request, slug):
    ctx = page_context(request)
    ctx.update(paginate(request, run_selectors.uploads_for(ctx["principal"], ctx["project"]), UPLOADS_PER_PAGE))
    ctx["uploads"] = ctx["page_obj"].object_list
    ctx["parts_above_bytes"] = settings.UPLOAD_PARTS_ABOVE_BYTES  # upload.js sends larger files in parts
    return render(request, "dashboards/uploads.html", ctx)


@project_page
def upload_detail(request, slug, pk):
    ctx = page_context(request)
    upload = get_scoped_or_404(run_selectors.uploads_for(request.principal), request.project, pk=pk)
    ctx.update(upload=upload, jobs=job_selectors.jobs_for_subject(ctx["principal"], "upload", upload.original.pk))
    return render(request, "dashboards/upload_detail.html", ctx)


@signed_in_page
def job_page(request, pk):
    principal = request.principal
    job = job_selectors.get_job(principal, pk)
    ctx = page_context(request, job.project, job=job)
    if job.subject_kind == "upload" and job.subject_id:
        ctx["subject_upload"] = run_selectors.uploads_for(principal).filter(pk=job.subject_id).first()
    return render(request, "dashboards/job.html", ctx)


@signed_in_page
def job_result(request, pk):
    """Redirect to what a finished job produced (its certificate, fidelity report, results…): live events link
    here knowing only the job's id."""
    job = job_selectors.get_job(request.principal, pk)
    url = job_outcomes.product_url(job)
    if url is None:
        messages.info(request, f"Job #{job.pk} has nothing to show yet: it is {job.outcome['text']}.")
        return redirect("dashboards:job", pk=job.pk)
    return redirect(url)


@signed_in_page
def glossary(request):
    return render(request, "dashboards/glossary.html", page_context(request))


RUNS_PER_PAGE = 25


@project_page
def runs_page(request, slug):
    """The project's runs table: sort, range filters, search, pages; select runs to compare; CSV/JSON export of
    every row the filters keep (``?format=csv|json``)."""
    ctx = page_context(request)
    base = tables.runs_table(run_selectors.runs_for(ctx["principal"], ctx["project"]))
    status = 200
    try:
        rows, applied = tables.filter_runs(base, request.GET)
        fmt = request.GET.get("format")
        if fmt:
            return tables.export_rows(
                rows.iterator(chunk_size=500), tables.EXPORT_RUN_COLUMNS, fmt, f"{ctx['project'].slug}-runs"
            )
    except tables.TableInputError as exc:
        if request.GET.get("format"):
            return json_error("invalid_parameter", str(exc), 400)
        messages.error(request, f"Runs table: {exc}. Showing the runs without that filter.")
        rows, applied, status = tables.filter_runs(base, {"sort": tables.DEFAULT_RUN_SORT})[0], {}, 400
    ctx.update(paginate(request, rows, RUNS_PER_PAGE))
    runs = list(ctx["page_obj"].object_list)
    param_cols = [tables.param_column(k) for k in tables.param_keys(runs)]
    try:
        columns = tables.visible_columns(request.GET, param_cols)
    except tables.TableInputError as exc:
        messages.error(request, f"Runs table: {exc}. Showing the default columns.")
        columns, status = tables.visible_columns({}, param_cols), 400
    shown = {c.key for c in columns}
    sort = applied.get("sort", tables.DEFAULT_RUN_SORT)
    query = request.GET.copy()
    for k in ("page", "format"):
        query.pop(k, None)
    range_fields = [
        {
            "col": col,
            **{
                f"{side}_{part}": (f"{side}_{col.key}" if part == "name" else applied.get(f"{side}_{col.key}", ""))
                for side in ("min", "max")
                for part in ("name", "value")
            },
        }
        for col in tables.RANGE_COLUMNS
    ]
    ctx.update(
        runs=runs,
        columns=columns,
        range_fields=range_fields,
        column_choices=[{"col": c, "shown": c.key in shown} for c in [*tables.RUN_COLUMNS, *param_cols]],
        verdict_choices=list(VERDICT_LABELS.items()),
        applied=applied,
        sort=sort,
        query=query.urlencode(),
        sort_links=_sort_links(query, sort, param_cols),
        saved_views=saved_views.views_for(ctx["principal"], ctx["project"]),
        can_save_view=ctx["principal"].user is not None,
    )
    return render(request, "dashboards/runs.html", ctx, status=status)


@project_page
@require_POST
def save_view(request, slug):
    """Save the runs table's query (``query``, as the table's address has it) under ``name`` for the caller, then
    open the table with it (POST-redirect-GET: a reload saves nothing twice)."""
    ctx = page_context(request)
    url = reverse("dashboards:runs", kwargs={"slug": slug})
    try:
        view = saved_views.save_view(
            ctx["principal"], ctx["project"], request.POST.get("name", ""), request.POST.get("query", "")
        )
    except saved_views.SavedViewError as exc:
        messages.error(request, f"View not saved: {exc}.")
        query = request.POST.get("query", "")
        return redirect(f"{url}?{query}" if query and len(query) < 2000 else url)
    messages.success(request, f"View “{view.name}” saved.")
    return redirect(f"{url}?{view.query}" if view.query else url)


@project_page
@require_POST
def delete_view(request, slug, pk):
    """Delete one of the caller's saved views; another member's view is refused (it is not listed to them either),
    a view of another project is not found."""
    ctx = page_context(request)
    view = get_scoped_or_404(saved_views.in_project(request.project), pk=pk)
    if not saved_views.views_for(ctx["principal"], ctx["project"]).filter(pk=view.pk).exists():
        messages.error(request, "You can delete only the views you saved.")
    else:
        saved_views.delete_view(view)
        messages.success(request, f"View “{view.name}” deleted.")
    return redirect("dashboards:runs", slug=slug)


def _sort_links(query, current: str, param_cols) -> dict:
    """Per column: the query string that sorts by it (ascending first, then descending on a second click)."""
    links = {}
    for col in [*tables.RUN_COLUMNS, *param_cols]:
        if col.key not in tables.SORT_KEYS and not col.key.startswith("params."):
            continue
        q = query.copy()
        q["sort"] = f"-{col.key}" if current == col.key else col.key
        links[col.key] = {
            "href": "?" + q.urlencode(),
            "state": "ascending" if current == col.key else "descending" if current == f"-{col.key}" else "none",
        }
    return links


SEQUENCES_PER_PAGE = 50


@project_page
def sequences_page(request, slug, pk):
    """A certificate's sequences with the API's filters (status, step, accepted), paginated, each linked to its call
    in the fidelity drill-down; ``?format=csv|json`` exports every row the filters keep."""
    ctx = page_context(request)
    run = get_scoped_or_404(run_selectors.runs_for(request.principal), request.project, pk=pk)
    certificate = _chosen_certificate(request, ctx["principal"], run)
    if certificate is None:
        raise Http404("This run has no certificate yet.")
    status = 200
    try:
        filters = tables.sequence_filters(request.GET)
    except tables.TableInputError as exc:
        if request.GET.get("format"):
            return json_error("invalid_parameter", str(exc), 400)
        messages.error(request, f"Sequences: {exc}. Showing every sequence.")
        filters, status = {}, 400
    rows = certificate_selectors.sequences(certificate, **filters)
    fmt = request.GET.get("format")
    if fmt:
        try:
            return tables.export_rows(
                rows.values(*tables.SEQUENCE_COLUMNS).iterator(chunk_size=2000),
                tables.SEQUENCE_COLUMNS,
                fmt,
                f"{run.name}-certificate-{certificate.pk}-sequences",
            )
        except tables.TableInputError as exc:
            return json_error("invalid_parameter", str(exc), 400)
    ctx.update(paginate(request, rows, SEQUENCES_PER_PAGE))
    api_query = {k: ("true" if v is True else "false" if v is False else v) for k, v in filters.items()}
    ctx.update(
        run=run,
        certificate=certificate,
        filters=filters,
        statuses=tables.SEQUENCE_STATUSES,
        sequences=_with_call_links(certificate, ctx["page_obj"].object_list),
        api_url=f"/api/v1/certificates/{certificate.pk}/sequences/" + ("?" + urlencode(api_query) if api_query else ""),
        export_query=urlencode({"certificate": certificate.pk, **api_query}),
    )
    return render(request, "dashboards/sequences.html", ctx, status=status)


def _chosen_certificate(request, principal, run):
    certificates = certificate_selectors.certificates_for(principal).filter(run=run)
    chosen = request.GET.get("certificate")
    return (certificates.filter(pk=chosen).first() if chosen and chosen.isdigit() else None) or certificates.first()


def _with_call_links(certificate, sequences) -> list:
    """Each sequence with ``call_url``: its call in the fidelity drill-down (same upload, same line), when the upload's
    fidelity audit is stored. One query for the page."""
    from audit_portal.fidelity.models import FidelityCall

    sequences = list(sequences)
    calls = dict(
        FidelityCall.objects.filter(
            report__upload_id=certificate.upload_id, report__state="complete", line__in=[q.line for q in sequences]
        ).values_list("line", "id")
    )
    slug = certificate.project.slug
    for q in sequences:
        call = calls.get(q.line)
        q.call_url = reverse("fidelity:call", args=[slug, call]) if call else None
    return sequences


RUN_PAGE_ROWS = 100
RUN_PAGE_SEQUENCES = 25


@project_page
def run_page(request, slug, pk):
    ctx = page_context(request)
    run = get_scoped_or_404(run_selectors.runs_for(request.principal), request.project, pk=pk)
    certificates = certificate_selectors.certificates_for(ctx["principal"]).filter(run=run)
    certificate = _chosen_certificate(request, ctx["principal"], run)
    # A run gains an upload (and a certificate) per submission: the page shows the newest ones, each row from one
    # query (the rows' project, run and file name joined in), never every certificate's JSON.
    uploads = run.uploads.select_related("project", "run").order_by("-created_at", "-id")
    choices = (
        certificates.select_related(None).select_related("upload").only("id", "created_at", "upload__original_name")
    )
    ctx.update(
        run=run,
        uploads=uploads[:RUN_PAGE_ROWS],
        uploads_total=run.uploads.count(),
        certificate=certificate,
        certificates=choices[:RUN_PAGE_ROWS],
        certify_jobs=job_selectors.jobs_for(ctx["principal"], ctx["project"])
        .filter(kind="certify_upload", subject_kind="upload", subject_id__in=run.uploads.values("pk"))
        .exclude(state__in=["succeeded"])[:5],
    )
    routing_job = (
        job_selectors.jobs_for(ctx["principal"], ctx["project"])
        .filter(kind="routing_audit", subject_kind="upload", subject_id__in=run.uploads.values("pk"), state="succeeded")
        .order_by("-id")
        .first()
    )
    ctx["live"] = live_selectors.live_view(run)  # a run that grows while it trains (templates/live/run_panel.html)
    # the run's verdict: of its live view when it streams (the chosen certificate is then one segment's), else of
    # the certificate shown — the same one the runs table and the API give
    ctx["run_verdict"] = (
        (ctx["live"] or {}).get("verdict")
        if ctx["live"]
        else (certificate.verdict_detail if certificate is not None and certificate.verdict else None)
    )
    ctx["firing_alerts"] = ctx["live"]["firing"] if ctx["live"] else alert_selectors.firing_for_run(run.pk)
    if routing_job is not None:  # logs with MoE routes (docs/routing.md)
        from audit_portal.dashboards.routing import routing_panel

        ctx.update(routing_job=routing_job, routing=routing_panel(routing_job.result or {}))
    if certificate is not None:
        ctx["best_bound_label"] = certificate_figures.BOUND_LABELS.get(certificate.best_bound_id, "")
        ctx["sources"] = certificate_selectors.divergence_sources(certificate)
        flagged = certificate_selectors.sequences(certificate, accepted=False)
        ctx.update(flagged=_with_call_links(certificate, flagged[:RUN_PAGE_SEQUENCES]), flagged_total=flagged.count())
    return render(request, "dashboards/run.html", ctx)


# headline rows of the comparison: (field, label, glossary anchor, which direction is better: +1 higher, −1 lower,
# 0 neither)
COMPARISON_ROWS = [
    ("eps_hat", "ε̂ largest certified token TV", "eps-hat", -1),
    ("delta_hat", "δ̂ largest token KL", "delta-hat", -1),
    ("acceptance_rate", "acceptance rate", "acceptance", +1),
    ("best_bound", "best bound B* at the reference length", "best-bound", -1),
    ("data_errors", "sequences with data errors", "statuses", -1),
    ("sequences", "sequences", "", 0),
    ("tokens", "tokens", "", 0),
]


def _number(value, signed=False) -> str:
    if value is None:
        return "—"
    sign = "+" if signed and value > 0 else ""
    return f"{sign}{value:,}" if isinstance(value, int) else f"{sign}{value:.4g}"


def _cell(first, value, better: int, is_first: bool) -> dict:
    """One run's value in a comparison row, with its difference from the first run and which way that goes."""
    diff = None if is_first or first is None or value is None else value - first
    verdict = (
        ""
        if is_first or diff is None
        else "same"
        if diff == 0
        else "neutral"
        if better == 0
        else ("better" if diff * better > 0 else "worse")
    )
    return {
        "value": value,
        "text": _number(value),
        "diff": diff,
        "diff_text": "" if diff is None else _number(diff, True),
        "verdict": verdict,
    }


def _compared_ids(request) -> list[str]:
    """``?c=<id>&c=<id>…`` (the runs table's selection), or the older ``?a=&b=``."""
    ids = request.GET.getlist("c") or [request.GET.get(k, "") for k in ("a", "b")]
    return [i for i in ids if i != ""]


@project_page
def compare_page(request, slug):
    """Two to eight of the project's certificates side by side (``?c=&c=…``, or ``?a=&b=``); each later run's
    numbers with their difference from the first; legends use run names. Without two ids it is the choice form."""
    ctx = page_context(request)
    mine = certificate_selectors.certificates_for(ctx["principal"], ctx["project"])
    ids = _compared_ids(request)
    chosen = {k: request.GET.get(k, "") for k in ("a", "b")}
    if not request.GET.get("a") and ids:
        chosen["a"] = ids[0]
    ctx.update(choices=mine.filter(state="complete").select_related("run", "upload")[:200], chosen=chosen)
    if len(ids) < 2 or not all(v.isdigit() for v in ids):
        return render(request, "dashboards/compare.html", ctx)
    if len(ids) > certificate_figures.MAX_COMPARED:
        messages.error(
            request,
            f"Compare at most {certificate_figures.MAX_COMPARED} certificates at once; {len(ids)} were selected.",
        )
        return render(request, "dashboards/compare.html", ctx, status=400)
    found = {
        c.pk: c for c in mine.filter(pk__in=[int(i) for i in ids], state="complete").select_related("run", "upload")
    }
    if len(found) < len(set(ids)):
        raise Http404("No such certificate in this project.")
    certs = [found[int(i)] for i in ids]
    base = request.GET.get("base", "")
    if base:  # the chosen baseline goes first: every difference is relative to it
        if not base.isdigit() or int(base) not in found:
            messages.error(
                request, f"The baseline must be one of the compared certificates ({', '.join(ids)}), got {base!r}."
            )
            return render(request, "dashboards/compare.html", ctx, status=400)
        certs.sort(key=lambda c: c.pk != int(base))
    names = _legend_names(certs)
    rows = []
    for key, label, anchor, better in COMPARISON_ROWS:
        values = [getattr(c, key) for c in certs]
        rows.append(
            {
                "key": key,
                "label": label,
                "anchor": anchor,
                "cells": [_cell(values[0], v, better, i == 0) for i, v in enumerate(values)],
            }
        )
    bound_ids = [k for k in certificate_figures.BOUND_IDS if any(c.bounds.get(k) is not None for c in certs)]
    bound_rows = [
        {
            "label": certificate_figures.BOUND_LABELS[k],
            "cells": [_cell(certs[0].bounds.get(k), c.bounds.get(k), -1, i == 0) for i, c in enumerate(certs)],
        }
        for k in bound_ids
    ]
    ctx.update(
        compared=list(zip(certs, names)),
        rows=rows,
        bound_rows=bound_rows,
        ids=ids,
        base=certs[0].pk,
        params_diff=params_diff([c.run.config if c.run else {} for c in certs]),
        api_export=_api_export(ctx["project"].slug, certs),
        caveat=certificate_selectors.COMPARISON_CAVEAT,
        a=certs[0],
        b=certs[1],
        figures=certificate_figures.comparison(certs, float(certs[0].budget.get("budget") or 0.1), names),
    )
    return render(request, "dashboards/compare.html", ctx)


def _api_export(slug: str, certs) -> str | None:
    """The API-key export of the compared runs (``runs.csv`` with a search for their names), so that a script gets
    the rows this page compares without a browser session; None when a name cannot be quoted in the search language
    (it holds both quote characters) or a certificate has no run."""
    names = sorted({c.run.name for c in certs if c.run})
    if len(names) != len({c.run_id for c in certs}) or any('"' in n and "'" in n for n in names):
        return None
    q = " or ".join("name = " + (f"'{n}'" if '"' in n else f'"{n}"') for n in names)
    return reverse("run-export", args=[slug, "csv"]) + "?" + urlencode({"q": q})


def params_diff(configs: list[dict]) -> dict:
    """The config keys whose values are not the same in every compared run (a missing key counts as a value):
    ``rows`` with each run's value as text and whether it differs from the baseline's (the first), and ``same``, how
    many keys agree everywhere. Nested objects are compared by their dotted leaf keys (``optim.lr``)."""

    def flat(config, prefix="") -> dict:
        out = {}
        for k, v in (config or {}).items():
            if isinstance(v, dict) and v:
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    missing = object()
    flats = [flat(c if isinstance(c, dict) else {}) for c in configs]
    keys = sorted({k for f in flats for k in f})
    rows, same = [], 0
    for key in keys:
        values = [f.get(key, missing) for f in flats]
        if all(v == values[0] for v in values):
            same += 1
            continue
        rows.append(
            {
                "key": key,
                "cells": [
                    {
                        "text": "—" if v is missing else (v if isinstance(v, str) else orjson.dumps(v).decode()),
                        "differs": i > 0 and v != values[0],
                    }
                    for i, v in enumerate(values)
                ],
            }
        )
    return {"rows": rows, "same": same, "keys": len(keys)}


def _legend_names(certs) -> list[str]:
    """Run names for legends; a run compared with itself (two uploads) gets its certificate number too."""
    names = [c.run.name if c.run else f"certificate {c.pk}" for c in certs]
    return [f"{n} (#{c.pk})" if names.count(n) > 1 else n for n, c in zip(names, certs)]


@project_page
def api_keys_page(request, slug):
    ctx = page_context(request)
    if not ctx["can_manage"]:
        messages.error(request, "Only project owners can manage API keys.")
        return redirect("dashboards:project", slug=slug)
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        scopes = [s for s in request.POST.getlist("scopes") if s in Scope.values]
        if not name or not scopes:
            messages.error(request, "Give the key a name and at least one scope.")
        else:
            issued = account_services.issue_api_key(
                project=ctx["project"], name=name, scopes=scopes, created_by=request.user
            )
            # the token is shown once, on the page the redirect opens (a reload issues no second key)
            show_once(request, "api-key-issued", {"key": issued.key.pk, "token": issued.token})
        return redirect("dashboards:api_keys", slug=slug)
    issued = take_shown_once(request, "api-key-issued")
    if issued:
        ctx["new_token"] = issued["token"]
        ctx["new_key"] = (
            account_selectors.api_keys_for(ctx["principal"], ctx["project"]).filter(pk=issued["key"]).first()
        )
    ctx["keys"] = account_selectors.api_keys_for(ctx["principal"], ctx["project"])
    ctx["scopes"] = Scope.choices
    return render(request, "dashboards/api_keys.html", ctx)


@project_page
@require_POST
def revoke_api_key(request, slug, pk):
    ctx = page_context(request)
    if not ctx["can_manage"]:  # the same answer as the keys page (and the API's 403), before looking up the key
        messages.error(request, "Only project owners can manage API keys.")
        return redirect("dashboards:project", slug=slug)
    key = get_scoped_or_404(account_selectors.api_keys_for(request.principal, request.project), noun="API key", pk=pk)
    account_services.revoke_api_key(key)
    messages.success(request, f"Key {key.name} ({key.prefix}…) revoked.")
    return redirect("dashboards:api_keys", slug=slug)
