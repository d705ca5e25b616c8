"""Security headers and cookies under the production settings, on pages and API responses; and the templates'
inline scripts carry the Content-Security-Policy nonce (a new template without it fails here, by name)."""

from __future__ import annotations

import importlib
import re
import secrets
import sys
from pathlib import Path

import pytest
from django.test import Client

from audit_portal.accounts.services import issue_api_key

pytestmark = pytest.mark.django_db

HOST = "portal.example.com"
TEMPLATES = Path(__file__).resolve().parents[3] / "templates"
INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)([^>]*)>", re.I)
INLINE_HANDLER = re.compile(r"<[a-z][^>]*\s(on[a-z]+)\s*=", re.I)


@pytest.fixture
def production(settings, monkeypatch):
    """Apply every setting audit_portal.settings_production changes, with the environment it requires."""
    monkeypatch.setenv("AUDIT_SECRET_KEY", secrets.token_urlsafe(64))
    monkeypatch.setenv("ALLOWED_HOSTS", HOST)
    sys.modules.pop("audit_portal.settings_production", None)
    prod = importlib.import_module("audit_portal.settings_production")
    sys.modules.pop("audit_portal.settings_production", None)
    changed = []
    for name in dir(prod):
        if name == "CACHES":  # the shared Redis cache is for rate limits, not headers: keep the test's own cache
            continue
        if name.isupper() and getattr(prod, name) != getattr(settings, name, object()):
            setattr(settings, name, getattr(prod, name))
            changed.append(name)
    assert {"SESSION_COOKIE_SECURE", "SECURE_HSTS_SECONDS", "CONTENT_SECURITY_POLICY"} <= set(changed)
    return prod


@pytest.fixture
def https(production):
    """A client that speaks HTTPS through the reverse proxy (X-Forwarded-Proto), as production traffic does."""
    return Client(HTTP_HOST=HOST, HTTP_X_FORWARDED_PROTO="https")


def assert_security_headers(response):
    h = response.headers
    assert h["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
    assert h["X-Content-Type-Options"] == "nosniff"
    assert h["X-Frame-Options"] == "DENY"
    assert h["Referrer-Policy"] == "same-origin"
    assert h["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "camera=()" in h["Permissions-Policy"]
    assert "Content-Security-Policy-Report-Only" not in h
    csp = dict((d.split(" ", 1) + [""])[:2] for d in h["Content-Security-Policy"].split("; "))
    assert csp["default-src"] == "'self'" and csp["object-src"] == "'none'" and csp["frame-ancestors"] == "'none'"
    assert csp["base-uri"] == "'self'" and csp["form-action"] == "'self'"
    assert "'unsafe-inline'" not in csp["script-src"] and "'unsafe-eval'" not in csp["script-src"]
    assert re.fullmatch(r"'self' 'nonce-[A-Za-z0-9_-]{20,}'", csp["script-src"])
    assert csp["connect-src"] == f"'self' wss://{HOST}"
    return csp


def test_pages_carry_the_security_headers_and_nonced_scripts(https, project, owner):
    https.force_login(owner)
    nonces = set()
    for url in ["/login/", f"/p/{project.slug}/", f"/p/{project.slug}/uploads/", "/contracts/"]:
        response = https.get(url, follow=False)
        if url == "/login/":
            assert response.status_code == 302  # signed in already: redirected, headers still set
        else:
            assert response.status_code == 200, url
            csp = assert_security_headers(response)
            nonce = re.search(r"'nonce-([^']+)'", csp["script-src"]).group(1)
            html = response.content.decode()
            scripts = INLINE_SCRIPT.findall(html)
            for attrs in scripts:
                assert f'nonce="{nonce}"' in attrs, f"{url}: inline <script{attrs}> lacks this response's nonce"
            assert not INLINE_HANDLER.search(html), f"{url}: inline event handler"
            nonces.add(nonce)
    assert len(nonces) == 3  # a fresh nonce per response
    # the project page and the uploads page run inline scripts (they need the nonce to run at all)
    assert INLINE_SCRIPT.search(https.get(f"/p/{project.slug}/").content.decode())


def test_api_and_error_responses_carry_the_security_headers(https, project, owner):
    token = issue_api_key(project=project, name="ci", scopes=["read"]).token
    for url, status in [
        ("/api/v1/projects/", 200),
        ("/api/schema/", 200),
        ("/api/v1/projects/nope/", 404),
        ("/no-such-page/", 404),
        ("/healthz", 200),
        ("/api/docs/", 200),
    ]:
        response = https.get(url, HTTP_AUTHORIZATION=f"Bearer {token}")
        assert response.status_code == status, url
        assert_security_headers(response)
    assert https.get("/api/v1/projects/", HTTP_AUTHORIZATION=f"Bearer {token}")["Content-Type"] == "application/json"
    # (no browsable HTML API in production: DRF binds renderers when the views are imported, so that setting is
    # checked on the settings module in test_deploy_check.py, not by overriding it here)


def test_plain_http_is_redirected_to_https_except_the_health_probe(production):
    plain = Client(HTTP_HOST=HOST)
    response = plain.get("/login/")
    assert response.status_code == 301 and response["Location"] == f"https://{HOST}/login/"
    assert plain.get("/healthz").status_code == 200
    assert Client(HTTP_HOST="evil.example.net", HTTP_X_FORWARDED_PROTO="https").get("/login/").status_code == 400


def test_session_and_csrf_cookies_are_secure_httponly_lax(https, owner):
    page = https.get("/login/")
    csrf = page.cookies["csrftoken"]
    assert csrf["secure"] and csrf["samesite"] == "Lax"
    response = https.post(
        "/login/", {"username": "olivia", "password": "pw-olivia-123", "csrfmiddlewaretoken": csrf.value}
    )
    assert response.status_code == 302
    session = response.cookies["sessionid"]
    assert session["secure"] and session["httponly"] and session["samesite"] == "Lax"
    assert int(session["max-age"]) <= 12 * 3600


def test_development_settings_report_the_policy_without_enforcing_it(client, owner, project):
    client.force_login(owner)
    response = client.get(f"/p/{project.slug}/")
    assert "Content-Security-Policy" not in response
    assert "'nonce-" in response["Content-Security-Policy-Report-Only"]
    assert response["X-Frame-Options"] == "DENY" and response["X-Content-Type-Options"] == "nosniff"


def test_every_template_inline_script_carries_the_nonce_and_no_inline_handlers():
    """A page's inline <script> runs under the enforced policy only with ``nonce="{{ csp_nonce }}"``, and inline
    event handlers (onclick=…) never run: use a static file or data attributes (static/js/live.js)."""
    problems = []
    for path in sorted(TEMPLATES.rglob("*.html")):
        text = path.read_text()
        for attrs in INLINE_SCRIPT.findall(text):
            if 'nonce="{{ csp_nonce }}"' not in attrs and "application/json" not in attrs:
                problems.append(f'{path.relative_to(TEMPLATES)}: <script{attrs}> needs nonce="{{{{ csp_nonce }}}}"')
        for handler in INLINE_HANDLER.findall(text):
            problems.append(
                f"{path.relative_to(TEMPLATES)}: inline event handler {handler}= is blocked by the "
                "Content-Security-Policy; bind it in a static script"
            )
        if re.search(r"""href=["']javascript:""", text, re.I):
            problems.append(f"{path.relative_to(TEMPLATES)}: javascript: URL")
    assert not problems, "\n".join(problems)
