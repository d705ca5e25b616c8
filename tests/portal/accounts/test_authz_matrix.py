"""The authorisation matrix: every URL of the API and the pages × every kind of caller × own / foreign project.

Callers: anonymous, a viewer, a member and an owner of project "own" (signed in), and API keys of "own" with the
read scope, the submit scope, revoked and expired. Each endpoint is asked about an object of "own", of "foreign"
(another tenant's project), and — where the URL names both a project and an object — "mixed" (own project's URL
with the foreign object's id). Expected, from the endpoint's declared access level:

  public   anyone (a revoked or expired key is still refused by the API: 401)
  user     any signed-in user or valid key (not project-scoped: the contract suite, the project list)
  read     anyone who may read the project: viewer, member, owner, read key, submit key
  submit   owner, member, submit key;  viewer and read key: refused (API 403; pages redirect with an error)
  manage   owner only (signed in: keys never manage keys)

and always: foreign or mixed → 404 (never 403: a tenant cannot learn that another's object exists); anonymous,
revoked and expired keys → 401 on the API, the login page on pages; API keys do not open pages. No response to an
"own" request mentions the foreign project.

THE TABLE (``ENDPOINTS``) MUST NAME EVERY URL: the resolver is walked, so a new URL without an entry fails
``test_every_url_has_an_entry`` with the pattern to add. Each request runs in a savepoint that is rolled back, so
a write allowed for one caller does not change what the next one sees.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import constants as message_levels
from django.contrib.messages import get_messages
from django.db import transaction
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient

from audit_portal.accounts.models import Project, Role
from audit_portal.accounts.services import add_member, create_project, issue_api_key, revoke_api_key
from audit_portal.certificates.models import RunCertificate
from audit_portal.fidelity.models import FidelityReport
from audit_portal.jobs import services as job_services
from audit_portal.jobs.models import Job
from audit_portal.kernels import services as kernel_services
from audit_portal.kernels.models import Contract
from audit_portal.routing import websocket_urlpatterns
from audit_portal.runs.models import Upload

from ..conftest import as_file, jsonl, records, upload_url

pytestmark = [pytest.mark.django_db, pytest.mark.xdist_group("authz-matrix")]

PRINCIPALS = ["anonymous", "viewer", "member", "owner", "key_read", "key_submit", "key_revoked", "key_expired"]
USERS = {"viewer": Role.VIEWER, "member": Role.MEMBER, "owner": Role.OWNER}
KEYS = {
    "key_read": ["read"],
    "key_submit": ["read", "submit"],
    "key_revoked": ["read", "submit"],
    "key_expired": ["read", "submit"],
}
ALLOWED = {
    "read": {"viewer", "member", "owner", "key_read", "key_submit"},
    "submit": {"owner", "member", "key_submit"},
    "manage": {"owner"},
}
OWN_SLUG, FOREIGN_SLUG = "authz-own-k3q", "authz-foreign-z8w"
TOY_VOCAB = b'{"0": "a", "1": "b", "2": "c"}'
TOY_VOCAB_2 = b'{"0": "x", "1": "y", "2": "z"}'  # registered by the matrix's POSTs: new, so 201 when allowed
CONTRACT_CLASS = "C-PRC-01"
ALERT_RULE = {"name": "over budget", "kind": "budget", "threshold": 0.1}
TRAINING_TINY = {
    "vocab": 16,
    "d_model": 16,
    "n_layers": 1,
    "n_heads": 2,
    "max_len": 16,
    "batch": 4,
    "group": 2,
    "prompt_len": 3,
    "length": 4,
    "topk": 4,
    "losses": ["ppo"],
}


# ------------------------------------------------------------------------------------------------ the world
@dataclass
class Objects:
    """One project's objects, as the URL builders see them."""

    slug: str
    upload: int = 0
    run: int = 0
    job: int = 0
    queued_job: int = 0
    certificate: int = 0
    report: int = 0
    call: int = 0
    submission: int = 0
    submission_b: int = 0
    implementation: int = 0
    badge_token: str = ""
    victim_key: int = 0
    training_audit: int = 0
    alert_rule: int = 0
    upload_session: str = ""
    saved_view: int = 0


@dataclass
class World:
    own: Objects
    foreign: Objects
    users: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=dict)
    root: object = None

    def objects(self, ownership: str) -> Objects:
        if ownership == "own":
            return self.own
        if ownership == "foreign":
            return self.foreign
        return Objects(**{**self.foreign.__dict__, "slug": self.own.slug})  # mixed: own URL, foreign ids


def _populate(project, owner) -> Objects:
    """Real uploads, jobs, certificate, fidelity report, tokenizer and kernel submissions, through the services
    and the tasks the workers run (no stand-in rows: every page and endpoint renders real data)."""
    from pipelines import certify_upload, fidelity_audit, validate_upload

    api = APIClient()
    api.force_authenticate(owner)
    response = api.post(
        upload_url(project), {"file": as_file(jsonl(records(trajectories=4, seed=5)))}, format="multipart"
    )
    assert response.status_code == 201, response.content
    upload = Upload.objects.get(pk=response.json()["id"])
    validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk)
    for kind, task in (("certify_upload", certify_upload), ("fidelity_audit", fidelity_audit)):
        job = Job.objects.get(subject_id=upload.pk, kind=kind)
        assert task(job.pk) == "succeeded", Job.objects.get(pk=job.pk).error
    upload.refresh_from_db()
    certificate = RunCertificate.objects.get(upload=upload, state=RunCertificate.State.COMPLETE)
    from audit_portal.live.services import tag_segment
    from pipelines import run_certificate_completed

    tag_segment(upload, (0, 10**9))  # the run's steps, streamed: its live view (/api/v1/runs/<id>/live/)
    run_certificate_completed(certificate_id=certificate.pk)
    report = FidelityReport.objects.get(upload=upload, state=FidelityReport.State.COMPLETE)
    assert (report.mask_export.get("files") or {}).get("jsonl"), "the audit should export masks"
    response = api.post(
        f"/api/v1/projects/{project.slug}/tokenizers/",
        {"file": as_file(TOY_VOCAB, "toy-vocab.json"), "name": "toy"},
        format="multipart",
    )
    assert response.status_code == 201, response.content
    subs = [
        kernel_services.submit_conformance(
            project=project,
            submitted_by="authz",
            device="cpu",
            contracts=[CONTRACT_CLASS],
            import_path=f"pkg.kernels{i}",
        )
        for i in range(2)
    ]
    queued = job_services.create_job(project=project, kind="test", task_name="x", title="queued", enqueue=False)
    from audit_portal.training import services as training_services
    from pipelines import training_step_audit

    badge_token = kernel_services.publish_badge(subs[0].implementation)
    training = training_services.submit(project=project, data=TRAINING_TINY, submitted_by="authz")
    from audit_portal.alerts import services as alert_services

    rule = alert_services.create_rule(project=project, data=ALERT_RULE, created_by="authz")
    from audit_portal.runs import chunked

    session = chunked.create_session(project=project, size=10, sha256="0" * 64, name="parts.jsonl", created_by="authz")
    assert training_step_audit(training.job_id) == "succeeded", Job.objects.get(pk=training.job_id).error
    from audit_portal.dashboards.models import SavedView

    view = SavedView.objects.create(project=project, owner=owner, name="owner's view", query="sort=name")
    return Objects(
        saved_view=view.pk,
        upload_session=str(session.pk),
        training_audit=training.pk,
        alert_rule=rule.pk,
        slug=project.slug,
        upload=upload.pk,
        run=upload.run_id,
        job=Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk,
        queued_job=queued.pk,
        certificate=certificate.pk,
        report=report.pk,
        call=report.calls.order_by("line").first().pk,
        submission=subs[0].pk,
        submission_b=subs[1].pk,
        implementation=subs[0].implementation_id,
        badge_token=badge_token,
        victim_key=issue_api_key(project=project, name="victim", scopes=["read"]).key.pk,
    )


# Signing the world's certificates appends to the transparency log, whose rows are append-only (triggers refuse
# DELETE): emptied the way the test suite's flush does it, when they were empty before the world was built.
LOG_MODELS = ("attestations.LogEntry", "attestations.Checkpoint", "attestations.SigningKey")


def _log_models():
    from django.apps import apps

    return [apps.get_model(label) for label in LOG_MODELS if apps.is_installed("audit_portal.attestations")]


def _remove_world(contracts_before: set[int], log_was_empty: bool) -> None:
    from django.core.management.color import no_style
    from django.db import connection

    User = get_user_model()
    Project.objects.filter(slug__in=[OWN_SLUG, FOREIGN_SLUG]).delete()  # cascades to everything in them
    User.objects.filter(username__startswith="authz-").delete()
    Contract.objects.exclude(pk__in=contracts_before).delete()
    if log_was_empty and _log_models():
        tables = [m._meta.db_table for m in _log_models()]
        connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), tables, allow_cascade=True))


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """Built once for the module (committed), removed at the end — also when building fails half-way."""
    from audit_portal.celery import app
    from workers.contracts.loader import SPECS_DIR  # the engine's shipped contract files

    root = tmp_path_factory.mktemp("authz-artifacts")
    User = get_user_model()
    with django_db_blocker.unblock():
        contracts_before = set(Contract.objects.values_list("pk", flat=True))
        log_was_empty = not any(m.objects.exists() for m in _log_models())
    broker = app.conf.broker_url
    try:
        with django_db_blocker.unblock(), override_settings(ARTIFACT_ROOT=root):
            app.conf.broker_url = "memory://"  # the world's jobs are run inline below, never by a worker
            app._pool = app.amqp._producer_pool = None
            kernel_services.store_contracts(kernel_services.parse_contract_files(sorted(SPECS_DIR.glob("*.yaml"))))
            users = {name: User.objects.create_user(f"authz-{name}", password="pw-authz-123") for name in USERS}
            stranger = User.objects.create_user("authz-stranger", password="pw-authz-123")
            own = create_project(name="Authz own", slug=OWN_SLUG, owner=users["owner"])
            foreign = create_project(name="Authz foreign", slug=FOREIGN_SLUG, owner=stranger)
            for name, role in USERS.items():
                add_member(project=own, user=users[name], role=role)
            keys = {name: issue_api_key(project=own, name=name, scopes=scopes) for name, scopes in KEYS.items()}
            revoke_api_key(keys["key_revoked"].key)
            expired = keys["key_expired"].key
            expired.expires_at = timezone.now() - timedelta(minutes=1)
            expired.save(update_fields=["expires_at"])
            w = World(
                own=_populate(own, users["owner"]),
                foreign=_populate(foreign, stranger),
                users=users,
                tokens={name: issued.token for name, issued in keys.items()},
                root=root,
            )
        app.conf.broker_url = broker
        app._pool = app.amqp._producer_pool = None
        yield w
    finally:
        app.conf.broker_url = broker
        with django_db_blocker.unblock():
            _remove_world(contracts_before, log_was_empty)


@pytest.fixture(autouse=True)
def _world_artifacts(_isolated_portal, settings, world):
    settings.ARTIFACT_ROOT = world.root  # the world's uploads and mask exports live there


# ---------------------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Access:
    level: str  # public | user | read | submit | manage
    url: Callable[[Objects], str]
    ok: tuple[int, ...] = (200,)
    body: Callable[[], dict] | None = None
    fmt: str = "json"  # json | multipart | form
    ok_location: str | None = None  # an allowed page POST redirects here (a refused one elsewhere)
    kind: str = "api"  # api: DRF (401/403/404 JSON) | page: Django view (login redirect, messages)


def _upload_body():
    return {"file": as_file(jsonl(records(trajectories=2, seed=77)))}


def _tokenizer_body():
    return {"file": as_file(TOY_VOCAB_2, "toy2.json"), "name": "toy2"}


def _page(level, url, **kw):
    return Access(level, url, kind="page", **kw)


P = "api/v1/projects/<slug:slug>/"
ENDPOINTS: dict[tuple[str, str], Access] = {
    # --- site ----------------------------------------------------------------------------------------------
    ("login/", "GET"): _page("public", lambda o: "/login/", ok=(200, 302)),
    ("login/", "POST"): _page(
        "public",
        lambda o: "/login/",
        ok=(200, 302),
        fmt="form",
        body=lambda: {"username": "nobody", "password": "wrong"},
    ),
    ("login/", "PUT"): _page("public", lambda o: "/login/", ok=(200, 302)),  # Django's FormView answers PUT as POST
    ("logout/", "POST"): _page("public", lambda o: "/logout/", ok=(302,), fmt="form"),
    ("healthz", "GET"): _page("public", lambda o: "/healthz"),
    ("api/schema/", "GET"): Access("public", lambda o: "/api/schema/"),
    ("api/docs/", "GET"): Access("public", lambda o: "/api/docs/"),
    # --- API: projects, keys ---------------------------------------------------------------------------------
    ("api/v1/projects/", "GET"): Access("user", lambda o: "/api/v1/projects/"),
    (P, "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/"),
    (P + "api-keys/", "GET"): Access("manage", lambda o: f"/api/v1/projects/{o.slug}/api-keys/"),
    (P + "api-keys/", "POST"): Access(
        "manage",
        lambda o: f"/api/v1/projects/{o.slug}/api-keys/",
        ok=(201,),
        body=lambda: {"name": "new", "scopes": ["read"]},
    ),
    (P + "api-keys/<int:pk>/revoke/", "POST"): Access(
        "manage", lambda o: f"/api/v1/projects/{o.slug}/api-keys/{o.victim_key}/revoke/"
    ),
    # --- API: uploads, runs, jobs --------------------------------------------------------------------------------
    (P + "uploads/", "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/uploads/"),
    (P + "uploads/", "POST"): Access(
        "submit", lambda o: f"/api/v1/projects/{o.slug}/uploads/", ok=(201,), body=_upload_body, fmt="multipart"
    ),
    (P + "runs/", "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/runs/"),
    (P + "runs.<str:fmt>", "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/runs.csv"),
    (P + "runs/", "POST"): Access(
        "submit",
        lambda o: f"/api/v1/projects/{o.slug}/runs/",
        ok=(200, 201),
        body=lambda: {"name": "authz-started", "tags": ["t"]},
    ),
    (P + "jobs/", "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/jobs/"),
    (P + "upload-sessions/", "POST"): Access(
        "submit",
        lambda o: f"/api/v1/projects/{o.slug}/upload-sessions/",
        ok=(201,),
        body=lambda: {"size": 5, "sha256": "1" * 64, "name": "a"},
    ),
    ("api/v1/upload-sessions/<uuid:pk>/", "GET"): Access(
        "read", lambda o: f"/api/v1/upload-sessions/{o.upload_session}/"
    ),
    # past authorisation an empty part is the wrong length and completing with no parts is refused: both 400
    ("api/v1/upload-sessions/<uuid:pk>/parts/<int:n>/", "PUT"): Access(
        "submit", lambda o: f"/api/v1/upload-sessions/{o.upload_session}/parts/0/", ok=(400,)
    ),
    ("api/v1/upload-sessions/<uuid:pk>/complete/", "POST"): Access(
        "submit", lambda o: f"/api/v1/upload-sessions/{o.upload_session}/complete/", ok=(400,)
    ),
    ("api/v1/uploads/<int:pk>/", "GET"): Access("read", lambda o: f"/api/v1/uploads/{o.upload}/"),
    ("api/v1/runs/<int:pk>/", "GET"): Access("read", lambda o: f"/api/v1/runs/{o.run}/"),
    ("api/v1/runs/<int:pk>/state/", "POST"): Access(
        "submit", lambda o: f"/api/v1/runs/{o.run}/state/", body=lambda: {"state": "finished"}
    ),
    ("api/v1/jobs/<int:pk>/", "GET"): Access("read", lambda o: f"/api/v1/jobs/{o.job}/"),
    ("api/v1/jobs/<int:pk>/cancel/", "POST"): Access("submit", lambda o: f"/api/v1/jobs/{o.queued_job}/cancel/"),
    # --- API: certificates -------------------------------------------------------------------------------------
    ("api/v1/runs/<int:pk>/certificate/", "GET"): Access("read", lambda o: f"/api/v1/runs/{o.run}/certificate/"),
    ("api/v1/certificates/compare/", "GET"): Access(
        "read", lambda o: f"/api/v1/certificates/compare/?a={o.certificate}&b={o.certificate}"
    ),
    ("api/v1/certificates/<int:pk>/", "GET"): Access("read", lambda o: f"/api/v1/certificates/{o.certificate}/"),
    ("api/v1/certificates/<int:pk>/sequences/", "GET"): Access(
        "read", lambda o: f"/api/v1/certificates/{o.certificate}/sequences/"
    ),
    ("api/v1/certificates/<int:pk>/figures/", "GET"): Access(
        "read", lambda o: f"/api/v1/certificates/{o.certificate}/figures/"
    ),
    # --- API: fidelity -------------------------------------------------------------------------------------------
    ("api/v1/fidelity/reports/<int:pk>/", "GET"): Access("read", lambda o: f"/api/v1/fidelity/reports/{o.report}/"),
    ("api/v1/fidelity/reports/<int:pk>/calls/", "GET"): Access(
        "read", lambda o: f"/api/v1/fidelity/reports/{o.report}/calls/"
    ),
    ("api/v1/fidelity/reports/<int:pk>/masks/", "GET"): Access(
        "read", lambda o: f"/api/v1/fidelity/reports/{o.report}/masks/?format=jsonl"
    ),
    ("api/v1/fidelity/calls/<int:pk>/", "GET"): Access("read", lambda o: f"/api/v1/fidelity/calls/{o.call}/"),
    ("api/v1/runs/<int:pk>/fidelity/", "GET"): Access("read", lambda o: f"/api/v1/runs/{o.run}/fidelity/"),
    ("api/v1/uploads/<int:pk>/fidelity/", "GET"): Access("read", lambda o: f"/api/v1/uploads/{o.upload}/fidelity/"),
    (P + "tokenizers/", "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/tokenizers/"),
    (P + "tokenizers/", "POST"): Access(
        "submit", lambda o: f"/api/v1/projects/{o.slug}/tokenizers/", ok=(201,), body=_tokenizer_body, fmt="multipart"
    ),
    # --- API: kernels ------------------------------------------------------------------------------------------------
    ("api/v1/contracts/", "GET"): Access("user", lambda o: "/api/v1/contracts/"),
    ("api/v1/contracts/<path:contract_id>/", "GET"): Access("user", lambda o: f"/api/v1/contracts/{CONTRACT_CLASS}/"),
    (P + "kernel-submissions/", "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/kernel-submissions/"),
    (P + "kernel-submissions/", "POST"): Access(
        "submit",
        lambda o: f"/api/v1/projects/{o.slug}/kernel-submissions/",
        ok=(201,),
        body=lambda: {"impl": "pkg.other_kernels", "contracts": [CONTRACT_CLASS]},
    ),
    (P + "kernels/matrix/", "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/kernels/matrix/"),
    ("api/v1/kernel-submissions/diff/", "GET"): Access(
        "read", lambda o: f"/api/v1/kernel-submissions/diff/?a={o.submission}&b={o.submission_b}"
    ),
    ("api/v1/kernel-submissions/<int:pk>/", "GET"): Access(
        "read", lambda o: f"/api/v1/kernel-submissions/{o.submission}/"
    ),
    ("api/v1/implementations/<int:pk>/status/", "GET"): Access(
        "read", lambda o: f"/api/v1/implementations/{o.implementation}/status/"
    ),
    ("api/v1/implementations/<int:pk>/badge.svg", "GET"): Access(
        "read", lambda o: f"/api/v1/implementations/{o.implementation}/badge.svg"
    ),
    ("api/v1/implementations/<int:pk>/public-badge/", "GET"): Access(
        "read", lambda o: f"/api/v1/implementations/{o.implementation}/public-badge/"
    ),
    ("api/v1/implementations/<int:pk>/public-badge/", "POST"): Access(
        "submit", lambda o: f"/api/v1/implementations/{o.implementation}/public-badge/", ok=(201,)
    ),
    ("api/v1/implementations/<int:pk>/public-badge/", "DELETE"): Access(
        "submit", lambda o: f"/api/v1/implementations/{o.implementation}/public-badge/", ok=(204,)
    ),
    # the token in the URL is the credential (a README badge is fetched without cookies or keys)
    ("badges/kernels/<str:token>.svg", "GET"): _page("public", lambda o: f"/badges/kernels/{o.badge_token}.svg"),
    # --- API: training-step audits ----------------------------------------------------------------------------------
    (P + "training-audits/", "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/training-audits/"),
    (P + "training-audits/", "POST"): Access(
        "submit", lambda o: f"/api/v1/projects/{o.slug}/training-audits/", ok=(201,), body=lambda: TRAINING_TINY
    ),
    ("api/v1/training-audits/<int:pk>/", "GET"): Access(
        "read", lambda o: f"/api/v1/training-audits/{o.training_audit}/"
    ),
    ("api/v1/training-audits/<int:pk>/tokens/", "GET"): Access(
        "read", lambda o: f"/api/v1/training-audits/{o.training_audit}/tokens/"
    ),
    # --- API and page: alerts ----------------------------------------------------------------------------------------
    (P + "alert-rules/", "GET"): Access("read", lambda o: f"/api/v1/projects/{o.slug}/alert-rules/"),
    (P + "alert-rules/", "POST"): Access(
        "submit", lambda o: f"/api/v1/projects/{o.slug}/alert-rules/", ok=(201,), body=lambda: ALERT_RULE
    ),
    ("api/v1/alert-rules/<int:pk>/", "GET"): Access("read", lambda o: f"/api/v1/alert-rules/{o.alert_rule}/"),
    ("api/v1/alert-rules/<int:pk>/", "DELETE"): Access(
        "submit", lambda o: f"/api/v1/alert-rules/{o.alert_rule}/", ok=(204,)
    ),
    ("api/v1/alert-rules/<int:pk>/", "PATCH"): Access(
        "submit", lambda o: f"/api/v1/alert-rules/{o.alert_rule}/", body=lambda: {"threshold": 0.5}
    ),
    ("api/v1/alert-rules/<int:pk>/secret/", "POST"): Access(
        "submit", lambda o: f"/api/v1/alert-rules/{o.alert_rule}/secret/"
    ),
    ("api/v1/runs/<int:pk>/alerts/", "GET"): Access("read", lambda o: f"/api/v1/runs/{o.run}/alerts/"),
    ("api/v1/runs/<int:pk>/live/", "GET"): Access("read", lambda o: f"/api/v1/runs/{o.run}/live/"),
    ("p/<slug:slug>/alerts/", "GET"): _page("read", lambda o: f"/p/{o.slug}/alerts/"),
    ("p/<slug:slug>/alerts/", "POST"): _page(
        "submit",
        lambda o: f"/p/{o.slug}/alerts/",
        ok=(302,),
        fmt="form",
        body=lambda: ALERT_RULE,
        ok_location=f"/p/{OWN_SLUG}/alerts/",
    ),
    ("p/<slug:slug>/alerts/<int:pk>/edit/", "POST"): _page(
        "submit",
        lambda o: f"/p/{o.slug}/alerts/{o.alert_rule}/edit/",
        ok=(302,),
        fmt="form",
        body=lambda: {"name": "renamed", "threshold": "0.5"},
        ok_location=f"/p/{OWN_SLUG}/alerts/",
    ),
    ("p/<slug:slug>/alerts/<int:pk>/secret/", "POST"): _page(
        "submit",
        lambda o: f"/p/{o.slug}/alerts/{o.alert_rule}/secret/",
        ok=(302,),
        fmt="form",
        ok_location=f"/p/{OWN_SLUG}/alerts/",
    ),
    ("p/<slug:slug>/alerts/<int:pk>/delete/", "POST"): _page(
        "submit",
        lambda o: f"/p/{o.slug}/alerts/{o.alert_rule}/delete/",
        ok=(302,),
        fmt="form",
        ok_location=f"/p/{OWN_SLUG}/alerts/",
    ),
    # --- API: signed certificates and the transparency log (keys, checkpoints, proofs are public) -----------------
    ("api/v1/keys/", "GET"): Access("public", lambda o: "/api/v1/keys/"),
    ("api/v1/log/checkpoint/", "GET"): Access("public", lambda o: "/api/v1/log/checkpoint/"),
    ("api/v1/log/consistency/", "GET"): Access("public", lambda o: "/api/v1/log/consistency/?first=1&second=1"),
    # C2SP endpoints (plain text, no credentials): a body that is no add-checkpoint request is refused as malformed
    ("api/v1/log/checkpoint.note", "GET"): Access("public", lambda o: "/api/v1/log/checkpoint.note"),
    ("api/v1/log/add-checkpoint", "POST"): Access("public", lambda o: "/api/v1/log/add-checkpoint", ok=(400,)),
    ("api/v1/log/key-events/", "GET"): Access("public", lambda o: "/api/v1/log/key-events/"),
    (".well-known/audit-portal-keys.json", "GET"): _page("public", lambda o: "/.well-known/audit-portal-keys.json"),
    ("api/v1/attestations/<str:kind>/<int:pk>/", "GET"): Access(
        "read", lambda o: f"/api/v1/attestations/run_certificate/{o.certificate}/?files=0"
    ),
    ("api/v1/attestations/<str:kind>/<int:pk>/bundle/", "GET"): Access(
        "read", lambda o: f"/api/v1/attestations/fidelity_report/{o.report}/bundle/"
    ),
    # --- pages: dashboards ---------------------------------------------------------------------------------------
    ("", "GET"): _page("user", lambda o: "/", ok=(302,), ok_location=f"/p/{OWN_SLUG}/"),
    ("p/<slug:slug>/", "GET"): _page("read", lambda o: f"/p/{o.slug}/"),
    ("p/<slug:slug>/uploads/", "GET"): _page("read", lambda o: f"/p/{o.slug}/uploads/"),
    ("p/<slug:slug>/uploads/<int:pk>/", "GET"): _page("read", lambda o: f"/p/{o.slug}/uploads/{o.upload}/"),
    ("p/<slug:slug>/runs/", "GET"): _page("read", lambda o: f"/p/{o.slug}/runs/"),
    ("p/<slug:slug>/runs/views/", "POST"): _page(
        "read",  # anyone who may read the project saves views for themselves (a viewer too)
        lambda o: f"/p/{o.slug}/runs/views/",
        ok=(302,),
        fmt="form",
        body=lambda: {"name": "mine", "query": "sort=name"},
        ok_location=f"/p/{OWN_SLUG}/runs/?sort=name",
    ),
    # only a view's author deletes it; the world's view is the project owner's, so viewer and member are refused
    ("p/<slug:slug>/runs/views/<int:pk>/delete/", "POST"): _page(
        "manage",
        lambda o: f"/p/{o.slug}/runs/views/{o.saved_view}/delete/",
        ok=(302,),
        fmt="form",
        ok_location=f"/p/{OWN_SLUG}/runs/",
    ),
    ("p/<slug:slug>/runs/<int:pk>/", "GET"): _page("read", lambda o: f"/p/{o.slug}/runs/{o.run}/"),
    ("p/<slug:slug>/runs/<int:pk>/sequences/", "GET"): _page("read", lambda o: f"/p/{o.slug}/runs/{o.run}/sequences/"),
    ("glossary/", "GET"): _page("user", lambda o: "/glossary/"),
    ("p/<slug:slug>/compare/", "GET"): _page(
        "read", lambda o: f"/p/{o.slug}/compare/?a={o.certificate}&b={o.certificate}"
    ),
    ("p/<slug:slug>/keys/", "GET"): _page("manage", lambda o: f"/p/{o.slug}/keys/"),
    ("p/<slug:slug>/keys/", "POST"): _page(
        "manage",
        lambda o: f"/p/{o.slug}/keys/",
        ok=(302,),
        fmt="form",
        body=lambda: {"name": "from-page", "scopes": ["read"]},
        ok_location=f"/p/{OWN_SLUG}/keys/",
    ),
    ("p/<slug:slug>/keys/<int:pk>/revoke/", "POST"): _page(
        "manage",
        lambda o: f"/p/{o.slug}/keys/{o.victim_key}/revoke/",
        ok=(302,),
        fmt="form",
        ok_location=f"/p/{OWN_SLUG}/keys/",
    ),
    ("jobs/<int:pk>/", "GET"): _page("read", lambda o: f"/jobs/{o.job}/"),
    ("jobs/<int:pk>/result/", "GET"): _page("read", lambda o: f"/jobs/{o.job}/result/", ok=(302,)),
    # --- pages: fidelity ---------------------------------------------------------------------------------------------
    ("p/<slug:slug>/runs/<int:pk>/fidelity/", "GET"): _page("read", lambda o: f"/p/{o.slug}/runs/{o.run}/fidelity/"),
    ("p/<slug:slug>/fidelity/calls/<int:pk>/", "GET"): _page("read", lambda o: f"/p/{o.slug}/fidelity/calls/{o.call}/"),
    ("p/<slug:slug>/fidelity/tokenizers/", "GET"): _page("read", lambda o: f"/p/{o.slug}/fidelity/tokenizers/"),
    ("p/<slug:slug>/fidelity/tokenizers/", "POST"): _page(
        "submit", lambda o: f"/p/{o.slug}/fidelity/tokenizers/", ok=(302,), body=_tokenizer_body, fmt="multipart"
    ),
    # --- pages: training-step audits ----------------------------------------------------------------------------------
    ("p/<slug:slug>/training/", "GET"): _page("read", lambda o: f"/p/{o.slug}/training/"),
    ("p/<slug:slug>/training/", "POST"): _page(
        "submit",
        lambda o: f"/p/{o.slug}/training/",
        ok=(302,),
        fmt="form",
        body=lambda: {**TRAINING_TINY, "losses": ["ppo"]},
        ok_location="/training/",
    ),
    ("p/<slug:slug>/training/<int:pk>/", "GET"): _page("read", lambda o: f"/p/{o.slug}/training/{o.training_audit}/"),
    # --- pages: kernels -------------------------------------------------------------------------------------------------
    ("contracts/", "GET"): _page("user", lambda o: "/contracts/"),
    ("contracts/<path:contract_id>/", "GET"): _page("user", lambda o: f"/contracts/{CONTRACT_CLASS}/"),
    ("p/<slug:slug>/kernels/", "GET"): _page("read", lambda o: f"/p/{o.slug}/kernels/"),
    ("p/<slug:slug>/kernels/submit/", "GET"): _page("read", lambda o: f"/p/{o.slug}/kernels/submit/"),
    ("p/<slug:slug>/kernels/submit/", "POST"): _page(
        "submit",
        lambda o: f"/p/{o.slug}/kernels/submit/",
        ok=(302,),
        fmt="form",
        body=lambda: {"source": "import", "impl": "pkg.page_kernels", "contracts": [CONTRACT_CLASS], "device": "cpu"},
        ok_location="/kernels/submissions/",
    ),
    ("p/<slug:slug>/kernels/implementations/<int:pk>/badge/", "POST"): _page(
        "submit",
        lambda o: f"/p/{o.slug}/kernels/implementations/{o.implementation}/badge/",
        ok=(302,),
        fmt="form",
        body=lambda: {"action": "publish"},
        ok_location="/kernels/submissions/",
    ),
    ("p/<slug:slug>/kernels/diff/", "GET"): _page(
        "read", lambda o: f"/p/{o.slug}/kernels/diff/?a={o.submission}&b={o.submission_b}"
    ),
    ("p/<slug:slug>/kernels/submissions/<int:pk>/", "GET"): _page(
        "read", lambda o: f"/p/{o.slug}/kernels/submissions/{o.submission}/"
    ),
}
# Django's admin has its own staff-only gate (test_admin_is_staff_only); websockets are refused by their consumers
# (tests/portal/live/test_consumers.py::test_strangers_and_anonymous_users_are_refused). Both are listed so that a new
# route there is a decision too.
ADMIN_PREFIX = "admin/"
WEBSOCKETS = {
    "ws/jobs/<int:job_id>/",
    "ws/projects/<slug:slug>/feed/",
    "ws/runs/<int:run_id>/live/",
    "ws/projects/<slug:slug>/alerts/",
}
METHODS = ("get", "post", "put", "patch", "delete")


# ------------------------------------------------------------------------------------------- route discovery
def _walk(patterns, prefix=""):
    for p in patterns:
        route = prefix + str(p.pattern)
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, route)
        elif isinstance(p, URLPattern):
            yield route, p.callback


def _methods(callback) -> set[str]:
    """The methods a route answers: a DRF view's handlers; a function view's GET, and POST when it reads it."""
    cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if cls is not None:  # DRF and Django class-based views: the handlers they define and allow
        return {m.upper() for m in METHODS if hasattr(cls, m) and m in cls.http_method_names}
    source = inspect.getsource(inspect.unwrap(callback))  # with its decorators
    if "@require_POST" in source:
        return {"POST"}
    reads_posts = any(s in source for s in ('request.method == "POST"', "request.POST", "request.FILES"))
    return {"GET", "POST"} if reads_posts else {"GET"}


def routes() -> dict[tuple[str, str], object]:
    found = {}
    for route, callback in _walk(get_resolver().url_patterns):
        if route.startswith(ADMIN_PREFIX):
            continue
        for method in _methods(callback):
            found[(route, method)] = callback
    return found


def test_every_url_has_an_entry():
    missing = sorted(set(routes()) - set(ENDPOINTS))
    stale = sorted(set(ENDPOINTS) - set(routes()))
    assert not missing, (
        "These URL patterns have no entry in the authorisation matrix (tests/portal/accounts/test_authz_matrix.py, ENDPOINTS):\n"
        + "\n".join(f"  ({route!r}, {method!r})" for route, method in missing)
        + "\nAdd one per route and method: the access level (public/user/read/submit/manage), a URL builder over "
        "the world's own/foreign objects (extend Objects/_populate if it needs a new kind of object), and the "
        "status an allowed caller gets."
    )
    assert not stale, f"entries for routes that no longer exist: {stale}"
    ws = {str(p.pattern) for p in websocket_urlpatterns}
    assert ws == WEBSOCKETS, f"websocket routes changed: {sorted(ws ^ WEBSOCKETS)}; add refusal tests for them"


# -------------------------------------------------------------------------------------------- expectations
def expected(access: Access, principal: str, ownership: str) -> set[str]:
    """The acceptable outcomes (one, except: a caller refused on their own project may be told so before the
    foreign object in a mixed URL is looked up — 403 there reveals nothing about it)."""
    is_key = principal.startswith("key_")
    if access.kind == "api" and principal in ("key_revoked", "key_expired"):
        return {"unauthenticated"}
    if access.level == "public":
        return {"ok"}
    if principal == "anonymous" or (access.kind == "page" and is_key) or principal in ("key_revoked", "key_expired"):
        return {"unauthenticated"}
    if access.level == "user":
        return {"ok"}
    allowed = principal in ALLOWED[access.level]
    if ownership == "foreign" or (ownership == "mixed" and allowed):
        return {"not_found"}
    if ownership == "mixed":
        return {"not_found", "denied"}
    return {"ok"} if allowed else {"denied"}


def _client(world: World, principal: str) -> Client:
    client = Client()
    if principal in USERS:
        client.force_login(world.users[principal])
    elif principal.startswith("key_"):
        client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {world.tokens[principal]}"
    return client


def _request(client: Client, method: str, url: str, access: Access):
    body = access.body() if access.body else {}
    if method == "GET":
        return client.get(url)
    if access.fmt == "json":
        return client.generic(method, url, data=json.dumps(body), content_type="application/json")
    return client.post(url, body)  # form-encoded or multipart (a file in the body)


def outcome(response, access: Access) -> str:
    """What the response means: ok / denied / not_found / unauthenticated (or 'status NNN' when none fits)."""
    status, location = response.status_code, response.get("Location", "")
    errors = [m for m in get_messages(response.wsgi_request) if m.level == message_levels.ERROR]
    if access.kind == "api":
        return {401: "unauthenticated", 403: "denied", 404: "not_found"}.get(
            status, "ok" if status in access.ok else f"status {status}"
        )
    if status == 404:
        return "not_found"
    if status == 302 and location.startswith("/login/") and access.level != "public":
        return "unauthenticated"
    if status == 403 or (status == 302 and errors):
        return "denied"
    if status in access.ok and not errors and (access.ok_location is None or access.ok_location in location):
        return "ok"
    return f"status {status} {location} {[str(m) for m in errors]}"


@pytest.mark.parametrize("route,method", sorted(ENDPOINTS), ids=lambda v: v or "<root>")
def test_access(world, route, method):
    access = ENDPOINTS[(route, method)]
    ownerships = ["own", "foreign"] + (["mixed"] if "<slug:slug>" in route and "<int:pk>" in route else [])
    if access.level in ("public", "user"):
        ownerships = ["own"]
    wrong = []
    for principal in PRINCIPALS:
        for ownership in ownerships:
            url = access.url(world.objects(ownership))
            with transaction.atomic():
                response = _request(_client(world, principal), method, url, access)
                transaction.set_rollback(True)
            want, got = expected(access, principal, ownership), outcome(response, access)
            if got not in want:
                wrong.append(
                    f"{principal:12} {ownership:8} {method} {url}: expected {'/'.join(sorted(want))}, got {got}"
                )
            content = b"".join(response.streaming_content) if response.streaming else response.content
            if ownership == "own" and FOREIGN_SLUG.encode() in content:
                wrong.append(f"{principal:12} {ownership:8} {method} {url}: the response names the foreign project")
            if response.status_code >= 500:
                wrong.append(f"{principal:12} {ownership:8} {method} {url}: server error {response.status_code}")
    assert not wrong, "\n".join(wrong)


def test_admin_is_staff_only(world):
    for principal in ("anonymous", "owner", "key_submit"):
        response = _client(world, principal).get("/admin/")
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), principal
