"""Clean failures for everything under ``/api/``, including what happens before or outside a DRF view.

DRF's exception handler (:mod:`audit_portal.core.errors`) covers errors a view raises as API exceptions. This
middleware covers the rest, so that every answer under ``/api/`` that is an error is the JSON envelope
``{"error": {"code", "message"}}`` with a stable code, and no request leaves files behind:

* the multipart parser's refusals (too many files → 400 ``too_many_files``, too many fields → 400
  ``too_many_fields``, a non-file body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` → 413 ``request_too_large``, a
  malformed body → 400 ``malformed_request``), which Django would answer with an HTML page;
* a NUL byte in the path or a query parameter (PostgreSQL cannot store or compare one: it was a 500) → 400
  ``invalid_parameter`` naming the parameter, before any view runs; a NUL byte reaching the database any other way
  → 400 ``invalid_parameter`` too;
* any other non-JSON error response (an unknown URL while ``DEBUG`` is on, a CSRF refusal, a 500) is replaced by
  the envelope with a code from its status;
* every ``.part`` file the hashing upload handler created for this request and that is still in
  ``artifacts/incoming/`` when the response is ready is removed, whatever went wrong (a stored upload was renamed
  away by then; a failed one is an orphan).
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.http import JsonResponse
from django.http.multipartparser import MultiPartParserError

log = logging.getLogger(__name__)
API_PREFIX = "/api/"
UPLOAD_PARTS_ATTR = "_hashing_upload_parts"  # set by audit_portal.runs.upload_handler

CODES_BY_STATUS = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    410: "gone",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "throttled",
    500: "server_error",
    502: "bad_gateway",
    503: "service_unavailable",
    504: "gateway_timeout",
}


def error_body(code: str, message: str, **detail) -> dict:
    """The one error envelope of every JSON error: ``{"error": {"code", "message"[, "detail"]}}``."""
    body = {"error": {"code": code, "message": message}}
    if detail:
        body["error"]["detail"] = detail
    return body


def json_error(code: str, message: str, status: int, **detail) -> JsonResponse:
    return JsonResponse(error_body(code, message, **detail), status=status)


def _nul_in_request(request) -> str | None:
    if "\x00" in request.path_info:
        return "the URL path"
    for name, values in request.GET.lists():
        if "\x00" in name or any("\x00" in v for v in values):
            return f"query parameter {name.replace(chr(0), '%00')!r}"
    return None


def forget_upload_parts(request) -> None:
    for path in getattr(request, UPLOAD_PARTS_ATTR, ()):
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as exc:  # never turn a cleanup into an error answer
            log.warning("could not remove the upload part %s: %s", path, exc)


class ApiErrorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        api = request.path_info.startswith(API_PREFIX)
        try:
            if api and (where := _nul_in_request(request)):
                return json_error(
                    "invalid_parameter", f"{where} contains a NUL byte (%00), which is never valid here", 400
                )
            response = self.get_response(request)
        finally:
            forget_upload_parts(request)
        if api and response.status_code >= 400 and not response.get("Content-Type", "").startswith("application/json"):
            status = response.status_code
            response = json_error(CODES_BY_STATUS.get(status, "error"), _reason(status), status)
        return response

    def process_exception(self, request, exc):
        if not request.path_info.startswith(API_PREFIX):
            return None
        if isinstance(exc, TooManyFilesSent):
            return json_error("too_many_files", f"Too many files in one request: {exc}", 400)
        if isinstance(exc, TooManyFieldsSent):
            return json_error("too_many_fields", f"Too many form fields in one request: {exc}", 400)
        if isinstance(exc, RequestDataTooBig):
            return json_error("request_too_large", f"The request's form data is too large: {exc}", 413)
        if isinstance(exc, MultiPartParserError):
            return json_error("malformed_request", f"The multipart body cannot be parsed: {exc}", 400)
        if isinstance(exc, SuspiciousOperation):
            return json_error("bad_request", "The request was refused as malformed.", 400)
        if isinstance(exc, ValueError) and "NUL (0x00)" in str(exc):  # psycopg: a NUL byte reached a query
            return json_error("invalid_parameter", "A value contains a NUL byte (%00), which is never valid here.", 400)
        return None


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase + "."
    except ValueError:
        return f"HTTP {status}."
