"""REST endpoints of resumable uploads in parts (audit_portal/runs/chunked.py)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.accounts.throttling import WorkBudgetMixin
from audit_portal.runs import chunked
from audit_portal.runs.api import UploadSerializer
from audit_portal.runs.models import UploadSession


class UploadSessionSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    part_count = serializers.IntegerField(read_only=True)
    upload = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)

    class Meta:
        model = UploadSession
        fields = [
            "id",
            "project",
            "name",
            "size_bytes",
            "sha256",
            "part_size",
            "part_count",
            "parts_received",
            "state",
            "upload",
            "config",
            "tags",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


def _session(request, pk, *, submit: bool) -> UploadSession:
    principal = request.principal
    sessions = UploadSession.objects.filter(project__in=principal.readable_projects()).select_related("project")
    session = get_scoped_or_404(sessions, pk=pk)
    if submit and not principal.can_submit(session.project):
        raise exceptions.PermissionDenied("Uploading needs the submit role (or an API key with the submit scope).")
    return session


class UploadSessionCreate(WorkBudgetMixin, APIView):
    """Start a resumable upload in parts: declare the file's ``size`` (and its ``name``; its ``sha256`` when the client
    can compute it first: then it is checked at completion, otherwise the server's digest stands)."""

    @extend_schema(
        request=inline_serializer(
            "UploadSessionRequest",
            {
                "size": serializers.IntegerField(min_value=1),
                "sha256": serializers.CharField(min_length=64, max_length=64, required=False, allow_null=True),
                "name": serializers.CharField(required=False),
                "config": serializers.DictField(
                    required=False,
                    help_text="the run's config (JSON object, same limits as a single-request upload's); handed "
                    "to the upload at completion and merged into its run when it is valid",
                ),
                "tags": serializers.ListField(
                    child=serializers.CharField(max_length=64),
                    required=False,
                    max_length=32,
                    help_text="the run's tags (or comma-separated text); added to its run's tags when valid",
                ),
            },
        ),
        responses={201: UploadSessionSerializer},
    )
    def post(self, request, slug):
        principal, project = request.principal, request.project
        if not principal.can_submit(project):
            raise exceptions.PermissionDenied("Uploading needs the submit role (or an API key with the submit scope).")
        data = request.data
        if not isinstance(data, dict):
            raise chunked.InvalidUploadSession(
                "Send a JSON object with size (and optionally sha256 and name).", code="invalid_body"
            )
        session = chunked.create_session(
            project=project,
            size=data.get("size"),
            sha256=data.get("sha256"),
            name=data.get("name"),
            created_by=principal.label,
            config=data.get("config"),
            tags=data.get("tags"),
        )
        return Response(UploadSessionSerializer(session).data, status=status.HTTP_201_CREATED)


class UploadSessionDetail(APIView):
    """An upload session: which parts are stored (resume by sending the others)."""

    @extend_schema(responses={200: UploadSessionSerializer})
    def get(self, request, pk):
        return Response(UploadSessionSerializer(_session(request, pk, submit=False)).data)


class UploadSessionPart(APIView):
    """PUT part ``n`` (0-based) as the raw request body (``application/octet-stream``), exactly ``part_size`` bytes
    (the last part: the rest). Any order, any number of times. Optional header ``X-Part-SHA256``: checked."""

    parser_classes = []  # the body is read as a stream by the view, never parsed or held whole

    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY},
        parameters=[OpenApiParameter("X-Part-SHA256", str, OpenApiParameter.HEADER, required=False)],
        responses={200: UploadSessionSerializer},
    )
    def put(self, request, pk, n):
        session = _session(request, pk, submit=True)
        raw = request.META.get("CONTENT_LENGTH")
        length = int(raw) if raw and raw.isdigit() else None
        session = chunked.store_part(session, n, request._request, length, request.headers.get("X-Part-SHA256"))
        return Response(UploadSessionSerializer(session).data)


class UploadSessionComplete(APIView):
    """Check the assembled file's SHA-256 and hand it to the same intake as a single-request upload."""

    @extend_schema(request=None, responses={201: UploadSerializer, 200: UploadSerializer})
    def post(self, request, pk):
        session = _session(request, pk, submit=True)
        principal = request.principal
        upload, created = chunked.complete(session, principal.label)
        return Response(
            UploadSerializer(upload, context={"principal": principal}).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            headers={"X-Duplicate-Upload": "false" if created else "true"},
        )
