"""Production settings: the base settings (audit_portal/settings.py) hardened for a deployment behind a
TLS-terminating reverse proxy.

    DJANGO_SETTINGS_MODULE=audit_portal.settings_production

Required environment (the import fails with ImproperlyConfigured naming what is missing):
  AUDIT_SECRET_KEY   at least 50 characters, e.g. ``python -c "import secrets; print(secrets.token_urlsafe(64))"``
  ALLOWED_HOSTS      comma-separated host names the portal answers to (no ``*``)

Optional:
  CSRF_TRUSTED_ORIGINS          comma-separated, e.g. https://portal.example.com (base settings)
  SECURE_SSL_REDIRECT           "1" (default) redirects plain HTTP to HTTPS, except /healthz
  SECURE_HSTS_SECONDS           default one year; "0" disables HSTS (e.g. while trying a new host name)
  SECURE_HSTS_PRELOAD           "1" (default) adds ``preload`` to the HSTS header
  SESSION_COOKIE_AGE_SECONDS    default 12 hours
  CACHE_URL                     Redis for the shared cache (rate limits); default REDIS_URL; none: per-process memory

Every database, broker and storage setting is read from the environment exactly as in development (README).
``manage.py check --deploy --fail-level WARNING`` is clean under this module (tests/portal/core/test_deploy_check.py).
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

_DEV_KEY = "dev-only-insecure-key-change-me"


def _required(name: str, hint: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise ImproperlyConfigured(f"{name} must be set for audit_portal.settings_production: {hint}")
    return value


_secret = _required(
    "AUDIT_SECRET_KEY",
    'a random string of at least 50 characters, e.g. python -c "import secrets; print(secrets.token_urlsafe(64))"',
)
if len(_secret) < 50 or len(set(_secret)) < 5 or _secret == _DEV_KEY:
    raise ImproperlyConfigured("AUDIT_SECRET_KEY is too weak for production: use at least 50 random characters.")
_hosts = [
    h.strip()
    for h in _required(
        "ALLOWED_HOSTS", "the comma-separated host names the portal serves, e.g. portal.example.com"
    ).split(",")
    if h.strip()
]
if "*" in _hosts:
    raise ImproperlyConfigured("ALLOWED_HOSTS must name the portal's hosts; '*' is not allowed in production.")

from audit_portal.settings import *  # after the checks: a clear error comes first
from audit_portal.settings import CONTENT_SECURITY_POLICY as _BASE_CSP
from audit_portal.settings import env_bool

DEBUG = False
SECRET_KEY = _secret
ALLOWED_HOSTS = _hosts

# --- HTTPS (TLS terminates at the reverse proxy, which sets X-Forwarded-Proto) ---------------------------
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # load-balancer probes speak plain HTTP inside the network
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", 365 * 24 * 3600))
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)

# --- cookies and sessions ------------------------------------------------------------------------------
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_AGE = int(os.environ.get("SESSION_COOKIE_AGE_SECONDS", 12 * 3600))
# (HttpOnly session cookie, SameSite=Lax, nosniff, Referrer-Policy, COOP, X-Frame-Options DENY: base settings)

# --- cache: one for every web process, so the rate limits (uploads, kernel submissions, sign-in) are global ----
# (the base settings' per-process memory cache would give each process its own budget)
_cache_url = os.environ.get("CACHE_URL") or REDIS_URL
if _cache_url:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _cache_url,
            "KEY_PREFIX": "audit-portal-cache",
        }
    }

# --- Content-Security-Policy: enforced, websockets over TLS only -----------------------------------------
CONTENT_SECURITY_POLICY = {**_BASE_CSP, "connect-src": ["'self'", "wss://{host}"], "upgrade-insecure-requests": []}
CONTENT_SECURITY_POLICY_REPORT_ONLY = False

# --- API: no browsable HTML API in production (JSON only; the OpenAPI docs stay at /api/docs/) -----------
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"]}
