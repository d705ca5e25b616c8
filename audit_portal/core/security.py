"""Security headers Django 5.2 does not set itself: a Content-Security-Policy with a per-request nonce, and a
Permissions-Policy.

``settings.CONTENT_SECURITY_POLICY`` maps directives to lists of sources; ``{nonce}`` in a source is replaced
by the request's nonce and ``{host}`` by the request's (ALLOWED_HOSTS-validated) host, so the websocket
endpoints of this origin can be allowed explicitly (older browsers do not let ``'self'`` cover ``wss:``).
Templates put the nonce on their inline scripts: ``<script nonce="{{ csp_nonce }}">`` (the ``portal`` context
processor provides it). Inline event handlers (``onchange=…``) cannot carry a nonce; pages use data attributes
handled in ``static/js/live.js`` instead. ``CONTENT_SECURITY_POLICY_REPORT_ONLY`` sends the policy as
``Content-Security-Policy-Report-Only`` (development); the production settings enforce it.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.utils.deprecation import MiddlewareMixin

CSP_HEADER = "Content-Security-Policy"
CSP_REPORT_ONLY_HEADER = "Content-Security-Policy-Report-Only"


def build_policy(directives: dict[str, list[str]], *, nonce: str, host: str) -> str:
    parts = []
    for directive, sources in directives.items():
        values = [s.replace("{nonce}", nonce).replace("{host}", host) for s in sources if host or "{host}" not in s]
        parts.append(" ".join([directive, *values]) if values else directive)
    return "; ".join(parts)


class SecurityHeadersMiddleware(MiddlewareMixin):
    """Sets ``request.csp_nonce`` and adds the CSP and Permissions-Policy headers to every response that does
    not set its own."""

    def process_request(self, request):
        request.csp_nonce = secrets.token_urlsafe(18)

    def process_response(self, request, response):
        directives = getattr(settings, "CONTENT_SECURITY_POLICY", None)
        if directives:
            header = (
                CSP_REPORT_ONLY_HEADER
                if getattr(settings, "CONTENT_SECURITY_POLICY_REPORT_ONLY", False)
                else CSP_HEADER
            )
            if header not in response:
                try:
                    host = request.get_host()
                except DisallowedHost:
                    host = ""
                nonce = getattr(request, "csp_nonce", None) or secrets.token_urlsafe(18)
                response[header] = build_policy(directives, nonce=nonce, host=host)
        permissions = getattr(settings, "PERMISSIONS_POLICY", None)
        if permissions and "Permissions-Policy" not in response:
            response["Permissions-Policy"] = permissions
        return response
