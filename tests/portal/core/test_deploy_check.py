"""`manage.py check --deploy` is clean under audit_portal.settings_production, and the module refuses to load
without the secrets and host names a deployment must provide."""

from __future__ import annotations

import importlib
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

ROOT = Path(__file__).resolve().parents[3]
PRODUCTION = "audit_portal.settings_production"
# The test environment sets DJANGO_ALLOW_ASYNC_UNSAFE (pytest's sync DB access under Channels); a deployment must
# not (async.E001), so the check runs without it, as a deployment would.
DEPLOYMENT_UNSET = {"AUDIT_SECRET_KEY", "ALLOWED_HOSTS", "AUDIT_DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE"}


def _check_deploy(settings_module: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in DEPLOYMENT_UNSET}
    environ.update(DJANGO_SETTINGS_MODULE=settings_module, **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_check_deploy_is_clean_under_the_production_settings():
    result = _check_deploy(PRODUCTION, AUDIT_SECRET_KEY=secrets.token_urlsafe(64), ALLOWED_HOSTS="portal.example.com")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_flags_the_development_settings():
    """The same check fails on the development settings: it is not vacuous."""
    result = _check_deploy("audit_portal.settings")
    assert result.returncode != 0
    for code in ("security.W004", "security.W008", "security.W012", "security.W016", "security.W018"):
        assert code in result.stderr, code


def _load_production(monkeypatch, **env):
    for name in ("AUDIT_SECRET_KEY", "ALLOWED_HOSTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sys.modules.pop(PRODUCTION, None)
    try:
        return importlib.import_module(PRODUCTION)
    finally:
        sys.modules.pop(PRODUCTION, None)


@pytest.mark.parametrize(
    "env,missing",
    [
        ({"ALLOWED_HOSTS": "portal.example.com"}, "AUDIT_SECRET_KEY must be set"),
        ({"AUDIT_SECRET_KEY": "k" * 20 + secrets.token_urlsafe(48)}, "ALLOWED_HOSTS must be set"),
        ({"AUDIT_SECRET_KEY": "short-key", "ALLOWED_HOSTS": "portal.example.com"}, "too weak"),
        ({"AUDIT_SECRET_KEY": secrets.token_urlsafe(64), "ALLOWED_HOSTS": "*"}, "'*' is not allowed"),
    ],
)
def test_production_settings_refuse_to_load_without_secret_and_hosts(monkeypatch, env, missing):
    with pytest.raises(ImproperlyConfigured, match=missing):
        _load_production(monkeypatch, **env)


def test_production_settings_values(monkeypatch):
    key = secrets.token_urlsafe(64)
    prod = _load_production(monkeypatch, AUDIT_SECRET_KEY=key, ALLOWED_HOSTS="portal.example.com, api.example.com")
    assert prod.DEBUG is False and prod.SECRET_KEY == key
    assert prod.ALLOWED_HOSTS == ["portal.example.com", "api.example.com"]
    assert prod.SESSION_COOKIE_SECURE and prod.CSRF_COOKIE_SECURE and prod.SESSION_COOKIE_HTTPONLY
    assert prod.SESSION_COOKIE_SAMESITE == "Lax" and prod.X_FRAME_OPTIONS == "DENY"
    assert prod.SECURE_PROXY_SSL_HEADER == ("HTTP_X_FORWARDED_PROTO", "https")
    assert prod.SECURE_HSTS_SECONDS >= 365 * 24 * 3600 and prod.SECURE_SSL_REDIRECT
    assert prod.CONTENT_SECURITY_POLICY_REPORT_ONLY is False
    assert "'unsafe-inline'" not in prod.CONTENT_SECURITY_POLICY["script-src"]
    assert prod.REST_FRAMEWORK["DEFAULT_RENDERER_CLASSES"] == ["rest_framework.renderers.JSONRenderer"]


def test_production_shares_the_rate_limit_cache_through_redis(monkeypatch):
    monkeypatch.setenv("CACHE_URL", "redis://cache.internal:6379/3")
    prod = _load_production(monkeypatch, AUDIT_SECRET_KEY=secrets.token_urlsafe(64), ALLOWED_HOSTS="portal.example.com")
    cache = prod.CACHES["default"]
    assert cache["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert cache["LOCATION"] == "redis://cache.internal:6379/3"
