"""OpenAPI (drf-spectacular) description of the project API-key authentication, so every operation's schema
names its security schemes (``ApiKey`` bearer token, or the browser session cookie)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "audit_portal.accounts.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "Project API key: `Authorization: Bearer ap_…` (scopes `read`, `submit`).",
        }


ERROR_SCHEMA = {
    "type": "object",
    "description": "Every API error: a stable `code` for clients to branch on, a `message` for people.",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "example": "not_found"},
                "message": {"type": "string"},
                "detail": {"description": "field errors or structured context, when there is any"},
                "retry_after_seconds": {"type": "integer", "description": "with code `throttled`"},
            },
        }
    },
}
# Every operation can answer these; uploads (multipart POSTs) also the size, type, rate and storage ones.
COMMON_ERRORS = {
    "400": "invalid request (bad parameter or body)",
    "401": "no credentials, or an unknown, revoked or expired API key",
    "403": "authenticated, but the role or key scope does not allow this",
    "404": "no such object, or it belongs to a project the caller cannot read",
    "503": "the database or the job queue is not reachable; nothing was stored",
}
UPLOAD_ERRORS = {
    "413": "larger than the upload limit",
    "415": "not a supported file type or encoding",
    "429": "too many uploads: retry after `retry_after_seconds`",
    "507": "the artifact store is full; nothing was stored",
}


def document_error_responses(result, generator, request, public):
    """drf-spectacular post-processing hook: the error envelope (``audit_portal.core.errors``) as a component,
    referenced by the error responses each operation can give, unless the operation documents them itself."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("Error", ERROR_SCHEMA)
    ref = {"$ref": "#/components/schemas/Error"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            errors = dict(COMMON_ERRORS)
            if method == "post" and "multipart/form-data" in (operation.get("requestBody") or {}).get("content", {}):
                errors.update(UPLOAD_ERRORS)
            for status, description in errors.items():
                operation["responses"].setdefault(
                    status, {"description": description, "content": {"application/json": {"schema": ref}}}
                )
    return result
