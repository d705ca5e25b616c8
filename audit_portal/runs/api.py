"""REST endpoints for uploads and runs."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, generics, serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.accounts.throttling import WorkBudgetMixin
from audit_portal.core.errors import PortalError, StorageFull, UploadTooLarge
from audit_portal.jobs.selectors import jobs_for
from audit_portal.runs import extras, selectors, services
from audit_portal.runs.models import Run, Upload
from audit_portal.runs.upload_handler import MULTIPART_OVERHEAD


class UploadSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    run = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)  # null: schema says nullable
    duplicate_of = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    jobs = serializers.SerializerMethodField()

    class Meta:
        model = Upload
        fields = [
            "id",
            "project",
            "run",
            "original_name",
            "sha256",
            "size_bytes",
            "compression",
            "format",
            "stage",
            "duplicate_of",
            "error_count",
            "validation",
            "submitted_by",
            "config",
            "tags",
            "created_at",
            "processed_at",
            "jobs",
        ]
        read_only_fields = fields

    def get_jobs(self, upload) -> list[dict]:
        batched = self.context.get("jobs_by_upload")  # a list page fetches every row's jobs in one query
        if batched is not None:
            return batched.get(upload.pk, [])
        principal = self.context.get("principal")
        if principal is None:
            return []
        return jobs_by_upload(principal, [upload.pk]).get(upload.pk, [])


def jobs_by_upload(principal, upload_ids) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    jobs = (
        jobs_for(principal)
        .filter(subject_kind="upload", subject_id__in=list(upload_ids))
        .order_by("created_at", "id")
        .values("id", "kind", "state", "progress", "subject_id")
    )
    for j in jobs:
        out.setdefault(j.pop("subject_id"), []).append(j)
    return out


class RunSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Run
        fields = ["id", "project", "name", "config", "tags", "state", "missing_steps", "created_at", "updated_at"]
        read_only_fields = fields


class UploadListCreate(WorkBudgetMixin, generics.ListAPIView):
    """List a project's uploads, or upload a run log (multipart field ``file``)."""

    serializer_class = UploadSerializer
    parser_classes = [MultiPartParser]

    def get_serializer_context(self):
        # the schema generator asks for the serializer with a request no permission class has seen
        return {**super().get_serializer_context(), "principal": getattr(self.request, "principal", None)}

    def get_serializer(self, *args, **kwargs):
        if kwargs.get("many") and args:  # a list page: every row's jobs in one query, not one query per row
            rows = list(args[0])
            kwargs["context"] = {
                **self.get_serializer_context(),
                "jobs_by_upload": jobs_by_upload(self.request.principal, [u.pk for u in rows]),
            }
            args = (rows, *args[1:])
        return super().get_serializer(*args, **kwargs)

    def get_queryset(self):
        qs = selectors.uploads_for(self.request.principal, self.request.project)
        stage = self.request.query_params.get("stage")
        return qs.filter(stage=stage) if stage else qs

    @extend_schema(
        request={
            "multipart/form-data": inline_serializer(
                "UploadRequest",
                {
                    "file": serializers.FileField(),
                    "config": serializers.CharField(
                        required=False,
                        help_text="the run's config as a JSON object (text): at most 64 keys and 16 KiB, each value "
                        "a string, number, boolean, null or a list of at most 64 of those; merged into the run's "
                        "config when the upload is valid (docs/portal.md)",
                    ),
                    "tags": serializers.CharField(
                        required=False,
                        help_text='the run\'s tags: a JSON list of strings (["a", "b"]) or comma-separated text '
                        "(a,b); at most 32, each 1 to 64 characters; added to the run's tags when the upload is valid",
                    ),
                    # registered by audit_portal/live (runs/extras.py)
                    "steps": serializers.CharField(
                        required=False,
                        help_text="A-B: the file holds steps A to B of a run that "
                        "grows while it trains (docs/client.md)",
                    ),
                    "rank": serializers.IntegerField(
                        required=False,
                        min_value=0,
                        max_value=999999,
                        help_text="with steps: the process of a multi-process run that wrote them (default 0)",
                    ),
                },
            )
        },
        responses={
            201: UploadSerializer,
            200: OpenApiResponse(UploadSerializer, description="same bytes uploaded before: the first upload"),
        },
    )
    def post(self, request, slug):
        principal, project = request.principal, request.project
        if not principal.can_submit(project):
            raise exceptions.PermissionDenied("Uploading needs the submit role (or an API key with the submit scope).")
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > _limit() + MULTIPART_OVERHEAD:
            raise UploadTooLarge(f"The file exceeds the upload limit of {_human(_limit())}.")
        files = request.FILES  # parses the body through the streaming, hashing upload handler
        if getattr(request._request, "upload_too_large", False):
            raise UploadTooLarge(f"The file exceeds the upload limit of {_human(_limit())}.")
        if getattr(request._request, "upload_storage_full", False):
            raise StorageFull()
        received = [f for key in files for f in files.getlist(key)]
        uploaded = files.get("file")
        try:
            if uploaded is None:
                raise PortalError(
                    "Send the run log as multipart/form-data in a field named 'file'.", code="file_missing"
                )
            fields = extras.checked(request.data)  # e.g. live's "steps": a bad value is refused before storing
            upload, created = services.receive_upload(
                project=project,
                uploaded=uploaded,
                submitted_by=principal.label,
                config=fields.get("config"),
                tags=fields.get("tags"),
            )
            extras.store(upload, fields)
        finally:
            for extra in received:  # receive_upload disposes of the one it was given
                if extra is not uploaded:
                    extra.discard()
        data = UploadSerializer(upload, context={"principal": principal}).data
        return Response(
            data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            headers={"X-Duplicate-Upload": "false" if created else "true"},
        )


def _limit() -> int:
    from django.conf import settings

    return settings.UPLOAD_MAX_BYTES


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} PiB"


class UploadDetail(generics.RetrieveAPIView):
    serializer_class = UploadSerializer

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "principal": getattr(self.request, "principal", None)}

    def get_object(self):
        return selectors.get_upload(self.request.principal, self.kwargs["pk"])


class RunStartMixin:
    """``POST`` on a project's run list: a trainer client starts its run by name, or resumes it (the list itself,
    with each run's verdict and metrics, is dashboards/api.py's)."""

    @extend_schema(
        request=inline_serializer(
            "RunStart",
            {
                "name": serializers.CharField(help_text="the run's name: the run_id of its records"),
                "config": serializers.DictField(required=False, help_text="the trainer's configuration (JSON object)"),
                "tags": serializers.ListField(child=serializers.CharField(), required=False),
            },
        ),
        responses={201: RunSerializer, 200: OpenApiResponse(RunSerializer, description="the run existed: resumed")},
    )
    def post(self, request, slug):
        principal, project = request.principal, request.project
        if not principal.can_submit(project):
            raise exceptions.PermissionDenied(
                "Starting a run needs the submit role (or an API key with the submit scope)."
            )
        data = request.data if isinstance(request.data, dict) else {}
        run, created = services.start_run(
            project=project, name=data.get("name"), config=data.get("config"), tags=data.get("tags")
        )
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class RunState(APIView):
    """A trainer client ends its run: ``finished`` or ``failed``, with the steps it could not log."""

    @extend_schema(
        request=inline_serializer(
            "RunStateChange",
            {
                "state": serializers.ChoiceField(choices=services.RUN_STATES),
                "missing_steps": serializers.ListField(child=serializers.IntegerField(), required=False),
            },
        ),
        responses={200: RunSerializer},
    )
    def post(self, request, pk):
        principal = request.principal
        run = selectors.get_run(principal, pk)
        if not principal.can_submit(run.project):
            raise exceptions.PermissionDenied(
                "Changing a run's state needs the submit role (or an API key with the submit scope)."
            )
        data = request.data if isinstance(request.data, dict) else {}
        run = services.set_run_state(run, state=data.get("state"), missing_steps=data.get("missing_steps"))
        return Response(RunSerializer(run).data)
