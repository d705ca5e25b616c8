"""JSON errors with a stable ``code``: every API failure looks like

    {"error": {"code": "upload_too_large", "message": "…", "detail": {...}}}

Clients (CI pipelines) branch on ``code``; ``message`` is for people.
"""

from __future__ import annotations

import logging

from django import db
from rest_framework import exceptions, status
from rest_framework.response import Response

from audit_portal.core.api_errors import error_body

log = logging.getLogger(__name__)


class PortalError(exceptions.APIException):
    """An API error with an explicit stable code; subclasses set ``status_code`` and ``default_code``."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "bad_request"
    default_detail = "The request could not be processed."

    def __init__(self, message: str | None = None, *, code: str | None = None, extra: dict | None = None):
        super().__init__(message or self.default_detail, code or self.default_code)
        self.extra = extra or {}


class UploadTooLarge(PortalError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "upload_too_large"


class UnsupportedUpload(PortalError):
    status_code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
    default_code = "unsupported_media_type"


class QueueUnavailable(PortalError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "queue_unavailable"
    default_detail = "The job queue is not reachable; nothing was enqueued. Try again shortly."


class DatabaseUnavailable(PortalError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "database_unavailable"
    default_detail = "The database is not reachable; nothing was stored. Try again shortly."


class StorageFull(PortalError):
    status_code = status.HTTP_507_INSUFFICIENT_STORAGE
    default_code = "storage_full"
    default_detail = "The artifact store has no space left; the upload was not stored."


_CODES_BY_CLASS = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ParseError: "malformed_request",
    exceptions.ValidationError: "invalid",
}


def _code_for(exc: Exception) -> str:
    if isinstance(exc, PortalError):
        return str(exc.detail.code) if hasattr(exc.detail, "code") else exc.default_code
    for cls, code in _CODES_BY_CLASS.items():
        if isinstance(exc, cls):
            return code
    return "error"


def _message_for(exc: exceptions.APIException) -> str:
    detail = exc.detail
    if isinstance(detail, (list, dict)):
        if isinstance(exc, exceptions.ValidationError):
            return "Some fields are invalid; see detail."
        return str(detail)
    return str(detail)


def api_exception_handler(exc, context):
    """DRF exception handler that wraps every error in the stable envelope."""
    # imported here: rest_framework.views reads DEFAULT_PARSER_CLASSES when it is imported, and the parser
    # (core/parsers.py) raises this module's errors
    from rest_framework.views import exception_handler

    if isinstance(exc, (db.OperationalError, db.InterfaceError)):
        # PostgreSQL restarting or unreachable: a clear, retryable 503 instead of a 500 page. The connection is
        # replaced at the next request (CONN_HEALTH_CHECKS), so service resumes without a restart.
        log.error("database unavailable: %s", exc)
        exc = DatabaseUnavailable()
    if isinstance(exc, exceptions.APIException):
        response = exception_handler(exc, context)
        payload = {"code": _code_for(exc), "message": _message_for(exc)}
        if isinstance(exc.detail, (list, dict)):
            payload["detail"] = exc.detail
        if isinstance(exc, PortalError) and exc.extra:
            payload["detail"] = exc.extra
        if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
            payload["retry_after_seconds"] = int(exc.wait)
        response.data = {"error": payload}
        return response
    response = exception_handler(exc, context)  # Http404 / PermissionDenied from Django
    if response is not None:
        code = "not_found" if response.status_code == 404 else "permission_denied"
        response.data = error_body(code, str(response.data.get("detail", "")))
    return response


def error_response(code: str, message: str, http_status: int, **detail) -> Response:
    return Response(error_body(code, message, **detail), status=http_status)
