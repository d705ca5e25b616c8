from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from audit_portal.accounts.principal import Principal


class UploadRateThrottle(SimpleRateThrottle):
    """Upload rate per API key or per user (not per IP: many CI runners share one address)."""

    scope = "uploads"

    def get_rate(self):
        return settings.UPLOAD_THROTTLE_RATE

    def get_cache_key(self, request, view):
        principal = Principal.from_request(request)
        if principal.api_key is not None:
            ident = f"key{principal.api_key.pk}"
        elif principal.user is not None:
            ident = f"user{principal.user.pk}"
        else:
            ident = self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
