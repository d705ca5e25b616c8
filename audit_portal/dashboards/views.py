"""Server-rendered pages. Reads go through the scoped selectors; writes through services."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q, Sum
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from audit_portal.core.pages import page_context, paginate, require_in_project
from audit_portal.accounts import selectors as account_selectors
from audit_portal.accounts import services as account_services
from audit_portal.accounts.models import Scope
from audit_portal.accounts.principal import Principal
from audit_portal.certificates import figures as certificate_figures
from audit_portal.certificates import selectors as certificate_selectors
from audit_portal.jobs import outcomes as job_outcomes
from audit_portal.jobs import selectors as job_selectors
from audit_portal.runs import selectors as run_selectors




@login_required
def home(request):
    ctx = page_context(request)
    projects = list(ctx["projects"])
    if len(projects) == 1:
        return redirect("dashboards:project", slug=projects[0].slug)
    return render(request, "dashboards/home.html", ctx)


@login_required
def project_dashboard(request, slug):
    ctx = page_context(request, slug)
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


@login_required
def uploads_page(request, slug):
    ctx = page_context(request, slug)
    ctx.update(paginate(request, run_selectors.uploads_for(ctx["principal"], ctx["project"]), UPLOADS_PER_PAGE))
    ctx["uploads"] = ctx["page_obj"].object_list
    return render(request, "dashboards/uploads.html", ctx)


@login_required
def upload_detail(request, slug, pk):
    ctx = page_context(request, slug)
    upload = run_selectors.get_upload(ctx["principal"], pk)
    require_in_project(ctx, upload.project_id)
    ctx.update(upload=upload, jobs=job_selectors.jobs_for_subject(ctx["principal"], "upload", upload.original.pk))
    return render(request, "dashboards/upload_detail.html", ctx)


@login_required
def job_page(request, pk):
    principal = Principal.from_request(request)
    job = job_selectors.get_job(principal, pk)
    ctx = page_context(request, job.project.slug, job=job)
    if job.subject_kind == "upload" and job.subject_id:
        ctx["subject_upload"] = run_selectors.uploads_for(principal).filter(pk=job.subject_id).first()
    return render(request, "dashboards/job.html", ctx)


@login_required
def job_result(request, pk):
    """Redirect to what a finished job produced (its certificate, fidelity report, results…): live events link
    here knowing only the job's id."""
    job = job_selectors.get_job(Principal.from_request(request), pk)
    url = job_outcomes.product_url(job)
    if url is None:
        messages.info(request, f"Job #{job.pk} has nothing to show yet: it is {job.outcome['text']}.")
        return redirect("dashboards:job", pk=job.pk)
    return redirect(url)


RUN_PAGE_ROWS = 100


@login_required
def run_page(request, slug, pk):
    ctx = page_context(request, slug)
    run = run_selectors.get_run(ctx["principal"], pk)
    require_in_project(ctx, run.project_id)
    certificates = certificate_selectors.certificates_for(ctx["principal"]).filter(run=run)
    chosen = request.GET.get("certificate")
    certificate = (certificates.filter(pk=chosen).first() if chosen and chosen.isdigit() else None) or certificates.first()
    # A run gains an upload (and a certificate) per submission: the page shows the newest ones, each row from one
    # query (the rows' project, run and file name joined in), never every certificate's JSON.
    uploads = run.uploads.select_related("project", "run").order_by("-created_at", "-id")
    choices = certificates.select_related(None).select_related("upload").only("id", "created_at", "upload__original_name")
    ctx.update(run=run, uploads=uploads[:RUN_PAGE_ROWS], uploads_total=run.uploads.count(), certificate=certificate,
               certificates=choices[:RUN_PAGE_ROWS], certify_jobs=job_selectors.jobs_for(ctx["principal"], ctx["project"]).filter(
                   kind="certify_upload", subject_kind="upload", subject_id__in=run.uploads.values("pk")).exclude(
                   state__in=["succeeded"])[:5])
    if certificate is not None:
        ctx["flagged"] = certificate_selectors.sequences(certificate).exclude(status__in=["CERT_IN"])[:25]
    return render(request, "dashboards/run.html", ctx)


# headline rows of the comparison: (field, label, which direction is better: +1 higher, −1 lower, 0 neither)
COMPARISON_ROWS = [("eps_hat", "ε̂ (max certified token TV)", -1), ("delta_hat", "δ̂ (max token KL)", -1),
                   ("acceptance_rate", "acceptance rate", +1), ("best_bound", "B* at T_ref", -1),
                   ("data_errors", "sequences with data errors", -1), ("sequences", "sequences", 0),
                   ("tokens", "tokens", 0)]


def _number(value, signed=False) -> str:
    if value is None:
        return "—"
    sign = "+" if signed and value > 0 else ""
    return f"{sign}{value:,}" if isinstance(value, int) else f"{sign}{value:.4g}"


def _with_text(row: dict) -> dict:
    return {**row, "a_text": _number(row["a"]), "b_text": _number(row["b"]), "diff_text": _number(row["diff"], True)}


@login_required
def compare_page(request, slug):
    """Two of the project's certificates side by side (``?a=&b=``: certificate ids); without both, the choice."""
    ctx = page_context(request, slug)
    mine = certificate_selectors.certificates_for(ctx["principal"], ctx["project"])
    chosen = {k: request.GET.get(k, "") for k in ("a", "b")}
    ctx.update(choices=mine.filter(state="complete").select_related("run", "upload")[:200], chosen=chosen)
    if not all(v.isdigit() for v in chosen.values()):
        return render(request, "dashboards/compare.html", ctx)
    a, b = (mine.filter(pk=int(chosen[k]), state="complete").select_related("run", "upload").first() for k in "ab")
    if a is None or b is None:
        raise Http404("No such certificate in this project.")
    result = certificate_selectors.compare(a, b)
    rows = []
    for key, label, better in COMPARISON_ROWS:
        row = result["headline"][key]
        change = row["diff"]
        verdict = "same" if change == 0 else "neutral" if change is None or better == 0 else (
            "better" if change * better > 0 else "worse")
        rows.append(_with_text({"label": label, **row, "verdict": verdict}))
    bound_rows = [_with_text({"label": certificate_figures.BOUND_LABELS[k], **result["bounds"][k]})
                  for k in certificate_figures.BOUND_IDS if k in result["bounds"]]
    ctx.update(a=a, b=b, rows=rows, bound_rows=bound_rows, caveat=result["caveat"],
               figures=certificate_figures.comparison(a, b, float(a.budget.get("budget") or 0.1)))
    return render(request, "dashboards/compare.html", ctx)


@login_required
def api_keys_page(request, slug):
    ctx = page_context(request, slug)
    if not ctx["can_manage"]:
        messages.error(request, "Only project owners can manage API keys.")
        return redirect("dashboards:project", slug=slug)
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        scopes = [s for s in request.POST.getlist("scopes") if s in Scope.values]
        if not name or not scopes:
            messages.error(request, "Give the key a name and at least one scope.")
        else:
            issued = account_services.issue_api_key(project=ctx["project"], name=name, scopes=scopes,
                                                    created_by=request.user)
            ctx["new_token"] = issued.token
            ctx["new_key"] = issued.key
    ctx["keys"] = account_selectors.api_keys_for(ctx["principal"], ctx["project"])
    ctx["scopes"] = Scope.choices
    return render(request, "dashboards/api_keys.html", ctx)


@login_required
@require_POST
def revoke_api_key(request, slug, pk):
    ctx = page_context(request, slug)
    if not ctx["can_manage"]:  # the same answer as the keys page (and the API's 403), before looking up the key
        messages.error(request, "Only project owners can manage API keys.")
        return redirect("dashboards:project", slug=slug)
    key = get_object_or_404(account_selectors.api_keys_for(ctx["principal"], ctx["project"]), pk=pk)
    account_services.revoke_api_key(key)
    messages.success(request, f"Key {key.name} ({key.prefix}…) revoked.")
    return redirect("dashboards:api_keys", slug=slug)
