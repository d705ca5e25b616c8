from django.conf import settings


def portal(request):
    """Values every page template uses (mode banner, version)."""
    return {
        "portal_embedded_mode": settings.EMBEDDED_DATABASE or not settings.REDIS_URL,
        "portal_version": "1.0",
        # the Content-Security-Policy nonce for inline <script> elements (audit_portal.core.security)
        "csp_nonce": getattr(request, "csp_nonce", ""),
    }
