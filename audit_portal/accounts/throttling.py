from django.conf import settings
from rest_framework import exceptions
from rest_framework.throttling import SimpleRateThrottle


class UploadRateThrottle(SimpleRateThrottle):
    """Upload rate per API key or per user (not per IP: many CI runners share one address)."""

    scope = "uploads"

    def get_rate(self):
        return settings.UPLOAD_THROTTLE_RATE

    def get_cache_key(self, request, view):
        principal = request.principal  # set by IsAuthenticatedPrincipal (API) or the page decorators (pages)
        if principal.api_key is not None:
            ident = f"key{principal.api_key.pk}"
        elif principal.user is not None:
            ident = f"user{principal.user.pk}"
        else:
            ident = self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


class WorkBudgetMixin:
    """For API views whose POST queues work on a worker (uploads, kernel submissions, tokenizer registrations,
    training-step audits): every such POST draws on one budget per API key or user (``UPLOAD_THROTTLE_RATE``);
    reads are not limited."""

    def get_throttles(self):
        return [UploadRateThrottle()] if self.request.method == "POST" else []


def charge_work_budget(request) -> None:
    """The same budget for the signed-in pages' forms that queue work (kernel submission, training-step audit,
    tokenizer registration): raises DRF's ``Throttled`` (429, code ``throttled``) once it is spent; the pages show
    it like any other refused submission."""
    throttle = UploadRateThrottle()
    if not throttle.allow_request(request, None):
        raise exceptions.Throttled(throttle.wait())


class LoginThrottle:
    """Failed sign-ins counted per username (case-insensitive) in the cache: after ``LOGIN_FAILURE_LIMIT`` failures
    within ``LOGIN_FAILURE_WINDOW_SECONDS`` the username is refused — correct password or not — until the window
    passes. Per username, not per address: behind a reverse proxy every client shares one address. Unknown
    usernames are counted the same way, so the answer never reveals whether an account exists."""

    prefix = "login-failures:"

    def key(self, username: str) -> str:
        import hashlib

        return self.prefix + hashlib.sha256(username.strip().lower().encode()).hexdigest()

    def locked(self, username: str) -> bool:
        from django.core.cache import cache

        return cache.get(self.key(username), 0) >= settings.LOGIN_FAILURE_LIMIT

    def failed(self, username: str) -> None:
        from django.core.cache import cache

        key = self.key(username)
        if cache.add(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW_SECONDS):
            return
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.add(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW_SECONDS)
