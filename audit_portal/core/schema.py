"""OpenAPI (drf-spectacular) description of the project API-key authentication, so every operation's schema
names its security schemes (``ApiKey`` bearer token, or the browser session cookie)."""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "audit_portal.accounts.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "Project API key: `Authorization: Bearer ap_…` (scopes `read`, `submit`)."}
