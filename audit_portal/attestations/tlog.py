"""The log's endpoints in the transparency-log ecosystem's formats (C2SP), plain text, no credentials:

* ``GET /api/v1/log/checkpoint.note`` — the latest checkpoint (or ``?tree_size=``) as a C2SP tlog-checkpoint signed
  note, with every witness cosignature the log has accepted for it;
* ``POST /api/v1/log/add-checkpoint`` — the tlog-witness add-checkpoint shape (``old <size>``, the consistency proof
  from it, a blank line, the checkpoint note) carrying witnesses' cosignature/v1 lines: the log checks its own
  signature, that it signed exactly that tree head, the consistency proof, and each cosignature against the witness
  keys it is configured with (AUDIT_LOG_WITNESS_KEYS), then keeps them. 403: no cosignature by a configured witness;
  404: no checkpoint of that size; 409: a different tree head of that size (a fork: the log never signed it);
  422: the proof does not verify; 400: malformed;
* ``GET /api/v1/log/key-events/?tree_size=N`` — the log's key events (workers/verify/keylog.py) with inclusion
  proofs at tree size N, for a witness to derive the key set from the log itself.

The two reads answer errors in the API's JSON envelope; add-checkpoint answers in plain text, as tlog-witness says.
"""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions

from audit_portal.attestations import selectors, services
from audit_portal.attestations.api import PublicView
from audit_portal.core.errors import PortalError

TEXT = "text/plain; charset=utf-8"


def _size_param(request):
    raw = request.GET.get("tree_size")
    if raw is None:
        return None
    if not raw.isdigit():
        raise ValueError("tree_size must be a non-negative integer")
    return int(raw)


class CheckpointNote(PublicView):
    """The latest checkpoint (or the one of ``tree_size``) as a C2SP tlog-checkpoint signed note, with the witness
    cosignatures the log accepted (text/plain)."""

    @extend_schema(parameters=[OpenApiParameter("tree_size", int)], responses={(200, "text/plain"): str})
    def get(self, request):
        try:
            text = selectors.checkpoint_note(_size_param(request))
        except ValueError as exc:  # errors in the API's JSON envelope, like every error under /api/
            raise PortalError(str(exc), code="invalid_parameter") from None
        if text is None:
            raise exceptions.NotFound("The log has no checkpoint of that size.")
        return HttpResponse(text, content_type=TEXT)


class AddCheckpoint(PublicView):
    """tlog-witness add-checkpoint: ``old <size>``, the consistency proof (base64 lines), a blank line and the
    checkpoint note carrying witness cosignatures (text/plain). 200: the cosignature lines accepted."""

    @extend_schema(request=str, responses={200: str})
    def post(self, request):
        raw = request._request.body  # the raw text: never parsed as form or JSON
        if len(raw) > 64 * 1024:
            return HttpResponse("request too large\n", status=413, content_type=TEXT)
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            return HttpResponse("the request is not UTF-8\n", status=400, content_type=TEXT)
        status, text = services.add_cosignatures(body)
        return HttpResponse(text, status=status, content_type=TEXT)


class KeyEvents(PublicView):
    """The log's key events with inclusion proofs at ``tree_size`` (default: the latest checkpoint)."""

    @extend_schema(parameters=[OpenApiParameter("tree_size", int)], responses={200: dict})
    def get(self, request):
        try:
            data = selectors.key_events(_size_param(request))
        except ValueError as exc:
            raise PortalError(str(exc), code="invalid_parameter") from None
        if data is None:
            raise exceptions.NotFound("The log has no checkpoint of that size.")
        return JsonResponse(data)
