"""REST endpoints: contracts (the shared suite), conformance submissions, results matrix, diff, CI status
and badge. Submitting needs the submit role or an API key with the submit scope; everything else is scoped to
the caller's projects (a foreign submission or implementation is a 404)."""

from __future__ import annotations

from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, generics, serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.accounts.throttling import WorkBudgetMixin
from audit_portal.core.errors import PortalError, UploadTooLarge
from audit_portal.core.parsers import BoundedJSONParser
from audit_portal.kernels import selectors, services
from audit_portal.kernels.submission_input import KERNEL_MODULE_MAX_BYTES, check_kernel_module
from audit_portal.kernels.models import Contract, Device, Implementation, Submission, Verdict
from audit_portal.runs.upload_handler import MULTIPART_OVERHEAD


# ------------------------------------------------------------------------------------------ serializers
class ContractSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="contract_id")
    contract_class = serializers.CharField()
    calibration = serializers.SerializerMethodField()

    class Meta:
        model = Contract
        fields = [
            "id",
            "version",
            "contract_class",
            "family",
            "title",
            "protocol",
            "signature",
            "sha256",
            "source_name",
            "declared",
            "loaded_at",
            "calibration",
        ]
        read_only_fields = fields

    def get_calibration(self, contract) -> dict:
        batched = self.context.get("calibrations")  # the list fetches every contract's latest calibration at once
        state = selectors.calibration_state(
            contract, batched.get(contract.pk) if batched is not None else selectors.FETCH
        )
        calibration = state["calibration"]
        return {
            "status": state["status"],
            "problems": calibration.problems if calibration else [],
            "finished_at": calibration.finished_at if calibration else None,
        }


class ContractDetailSerializer(ContractSerializer):
    versions = serializers.SerializerMethodField()

    class Meta(ContractSerializer.Meta):
        fields = ContractSerializer.Meta.fields + ["spec", "source_text", "versions"]
        read_only_fields = fields

    def get_versions(self, contract) -> list[dict]:
        return [
            {"version": c.version, "sha256": c.sha256, "loaded_at": c.loaded_at}
            for c in selectors.contract_versions(contract.contract_id)
        ]


class ImplementationSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Implementation
        fields = [
            "id",
            "project",
            "name",
            "kind",
            "import_path",
            "functions",
            "code_sha256",
            "code_size",
            "original_filename",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class VerdictSerializer(serializers.ModelSerializer):
    contract_id = serializers.CharField(source="contract.contract_id")
    contract_version = serializers.CharField(source="contract.version")
    family = serializers.CharField(source="contract.family")
    has_trace = serializers.SerializerMethodField()

    class Meta:
        model = Verdict
        fields = [
            "contract_id",
            "contract_version",
            "contract_class",
            "family",
            "verdict",
            "statistic_name",
            "statistic",
            "bound",
            "margin",
            "margin_infinite",
            "reason",
            "signature",
            "assurance_level",
            "measurements",
            "impl_hash",
            "duration_s",
            "has_trace",
            "created_at",
        ]
        read_only_fields = fields

    def get_has_trace(self, verdict) -> bool:
        return bool(verdict.trace_storage)


class SubmissionSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    implementation = ImplementationSerializer(read_only=True)
    job = serializers.SerializerMethodField()
    verdicts = serializers.SerializerMethodField()
    counts = serializers.SerializerMethodField()
    kc_c = serializers.SerializerMethodField()
    links = serializers.SerializerMethodField()

    class Meta:
        model = Submission
        fields = [
            "id",
            "project",
            "implementation",
            "device",
            "plan",
            "job",
            "verdicts",
            "counts",
            "kc_c",
            "grade",
            "deployment_flags",
            "target",
            "environment",
            "submitted_by",
            "created_at",
            "finished_at",
            "links",
        ]
        read_only_fields = fields

    def get_job(self, submission) -> dict | None:
        job = submission.job
        if job is None:
            return None
        return {
            "id": job.pk,
            "state": job.state,
            "progress": job.progress,
            "message": job.message,
            "error": job.error,
            "queue": job.queue,
            # the same words and badge colour as the job's websocket events, and when it last changed: the page
            # renders whichever answer is newer, and a fetch must never turn "1 of 2 contracts failed" back into a
            # plain green "succeeded"
            "updated_at": job.updated_at.isoformat() if job.updated_at else None,
            "outcome": job.outcome,
        }

    def get_verdicts(self, submission) -> list[dict]:
        return VerdictSerializer(selectors.verdicts_of(submission), many=True).data

    def get_counts(self, submission) -> dict:
        return selectors.verdict_counts(submission.verdicts.all())

    def get_kc_c(self, submission) -> dict | None:
        return submission.kc_c

    def get_links(self, submission) -> dict:
        return {
            "page": f"/p/{submission.project.slug}/kernels/submissions/{submission.pk}/",
            "job": f"/api/v1/jobs/{submission.job_id}/" if submission.job_id else None,
            "status": f"/api/v1/implementations/{submission.implementation_id}/status/",
            "badge": f"/api/v1/implementations/{submission.implementation_id}/badge.svg",
        }


class SubmissionListSerializer(SubmissionSerializer):
    class Meta(SubmissionSerializer.Meta):
        fields = [
            "id",
            "project",
            "implementation",
            "device",
            "job",
            "counts",
            "kc_c",
            "submitted_by",
            "created_at",
            "finished_at",
            "links",
        ]
        read_only_fields = fields


# ---------------------------------------------------------------------------------------------- contracts
class ContractList(generics.ListAPIView):
    """The loaded contracts: the latest version of each suite contract, then of each declared-property contract
    (``declared: true``: run only when a submission names it by id); ``?all_versions=1`` for every version."""

    serializer_class = ContractSerializer
    pagination_class = None

    @extend_schema(parameters=[OpenApiParameter("all_versions", bool, description="every loaded version")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        if self.request.query_params.get("all_versions") in ("1", "true"):
            return Contract.objects.order_by("contract_class", "contract_id", "-loaded_at")
        return selectors.latest_contracts() + selectors.latest_contracts(declared=True)

    def get_serializer(self, *args, **kwargs):
        if kwargs.get("many") and args:
            rows = list(args[0])
            kwargs["context"] = {**self.get_serializer_context(), "calibrations": selectors.latest_calibrations(rows)}
            args = (rows, *args[1:])
        return super().get_serializer(*args, **kwargs)


class ContractDetail(generics.RetrieveAPIView):
    """One contract (full id or class), latest version unless ``?version=``: spec, source text, versions."""

    serializer_class = ContractDetailSerializer

    @extend_schema(parameters=[OpenApiParameter("version", str)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_object(self):
        return selectors.get_contract(self.kwargs["contract_id"], self.request.query_params.get("version"))


# ------------------------------------------------------------------------------------------- submissions
SUBMISSION_REQUEST = inline_serializer(
    "KernelSubmissionRequest",
    {
        "impl": serializers.CharField(
            required=False, help_text="import path 'package.module:function' or 'package.module'"
        ),
        "module": serializers.FileField(required=False, help_text="single-file kernel module (.py, UTF-8, ≤ 1 MiB)"),
        "function": serializers.CharField(required=False, help_text="one function name for every contract"),
        "functions": serializers.JSONField(required=False, help_text='{"C-PRC-01": "my_matmul", …}'),
        "contracts": serializers.ListField(
            child=serializers.CharField(),
            required=False,
            help_text="contract ids or classes (default: the whole suite)",
        ),
        "device": serializers.ChoiceField(choices=Device.choices, required=False, default="cpu"),
        "name": serializers.CharField(required=False, help_text="label of the implementation in the matrix"),
        "deployment_flags": serializers.JSONField(
            required=False,
            help_text='KC-A: the flags the deployment runs with, e.g. {"allow_tf32": true}; the classes '
            "they can change are measured again under them",
        ),
        "target": serializers.JSONField(
            required=False, help_text='KC-T: the level per family the deployment needs, e.g. {"ORD": 3}'
        ),
    },
)


class ProjectSubmissionListCreate(WorkBudgetMixin, generics.ListAPIView):
    """A project's conformance submissions, newest first; POST submits one (one job, live progress)."""

    serializer_class = SubmissionListSerializer
    parser_classes = [MultiPartParser, FormParser, BoundedJSONParser]

    def get_queryset(self):
        principal = self.request.principal
        # verdict counts per row come from one prefetch query, not one query per submission
        return (
            selectors.submissions_for(principal, self.request.project)
            .select_related("implementation__project")
            .prefetch_related("verdicts")
        )

    @extend_schema(
        request={"multipart/form-data": SUBMISSION_REQUEST, "application/json": SUBMISSION_REQUEST},
        responses={201: SubmissionSerializer},
    )
    def post(self, request, slug):
        principal, project = request.principal, request.project
        if not principal.can_submit(project):
            raise exceptions.PermissionDenied(
                "Submitting kernels needs the submit role (owner or member) or an API key with the submit scope."
            )
        submission = submit_from_request(request, project, principal)
        return Response(SubmissionSerializer(submission).data, status=status.HTTP_201_CREATED)


def submit_from_request(request, project, principal) -> Submission:
    """Shared by the API and the browser form: read the fields, check an uploaded module, submit."""
    declared = int(request.META.get("CONTENT_LENGTH") or 0)
    if declared > KERNEL_MODULE_MAX_BYTES + MULTIPART_OVERHEAD:
        raise UploadTooLarge(
            f"The request exceeds the kernel module limit of {KERNEL_MODULE_MAX_BYTES} bytes.",
            code="kernel_module_too_large",
        )
    data = request.data if hasattr(request, "data") else request.POST
    if not hasattr(data, "get"):  # a JSON body that is a list, a string or a number
        raise PortalError(
            "The request body must be a JSON object (or a form) with the submission's fields.", code="invalid_body"
        )
    files = request.FILES
    received = [f for key in files for f in files.getlist(key)]
    try:
        uploaded = files.get("module")
        module = None
        if uploaded is not None:
            if uploaded.size > KERNEL_MODULE_MAX_BYTES:
                raise UploadTooLarge(
                    f"{uploaded.name}: {uploaded.size} bytes exceeds the kernel module limit of "
                    f"{KERNEL_MODULE_MAX_BYTES} bytes.",
                    code="kernel_module_too_large",
                )
            uploaded.seek(0)
            module = check_kernel_module(uploaded.read(), uploaded.name or "")
        contracts = data.getlist("contracts") if hasattr(data, "getlist") else data.get("contracts")
        if isinstance(contracts, list) and len(contracts) == 1:
            contracts = contracts[0]  # a form field may carry "C-PRC-01, C-EXC-02" or a JSON list
        return services.submit_conformance(
            project=project,
            submitted_by=principal.label,
            device=_text(data, "device") or "cpu",
            contracts=contracts,
            import_path=_text(data, "impl") or None,
            module=module,
            module_filename=(uploaded.name if uploaded is not None else ""),
            function=_text(data, "function") or None,
            functions=data.get("functions"),
            name=_text(data, "name"),
            deployment_flags=data.get("deployment_flags"),
            target=data.get("target"),
        )
    finally:
        for f in received:  # the module is stored by content (services); the streamed temporary file goes
            if hasattr(f, "discard"):
                f.discard()


def _text(data, field: str) -> str:
    value = data.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PortalError(
            f"'{field}' must be a string, not {type(value).__name__}.", code="invalid_field", extra={"field": field}
        )
    return value.strip()


class SubmissionDetail(generics.RetrieveAPIView):
    """One submission with its verdicts so far (the submission page polls this as rows land)."""

    serializer_class = SubmissionSerializer

    def get_object(self):
        return selectors.get_submission(self.request.principal, self.kwargs["pk"])


class SubmissionDiff(APIView):
    """Contract-by-contract change from submission ``a`` to ``b``: regressed / improved / unchanged."""

    @extend_schema(
        parameters=[OpenApiParameter("a", int, required=True), OpenApiParameter("b", int, required=True)],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request):
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        if not (a.isdigit() and b.isdigit()):
            raise PortalError("Give two submission ids: ?a=<id>&b=<id>.", code="diff_needs_two_submissions")
        return Response(selectors.diff(request.principal, int(a), int(b)))


class ProjectMatrix(APIView):
    """The results matrix: contracts × (implementation, platform), cells with verdict and margin; per-column
    family pass rates and KC-C; the interop score."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug):
        data = selectors.matrix(request.principal, request.project)
        columns = [
            {
                "submission": c["submission"].pk,
                "implementation": c["implementation"].pk,
                "name": c["implementation"].name,
                "device": c["device"],
                "state": c["state"],
                "kc_c": c["kc_c"],
                "families": c["families"],
                "counts": c["counts"],
                "specific_failures": c["specific_failures"],
            }
            for c in data["columns"]
        ]
        rows = [
            {
                "contract_id": r["contract_id"],
                "all_pass": r["all_pass"],
                "cells": [
                    None
                    if v is None
                    else {"verdict": v.verdict, "margin": v.margin, "margin_infinite": v.margin_infinite}
                    for v in r["cells"]
                ],
            }
            for r in data["rows"]
        ]
        return Response({"columns": columns, "rows": rows, "interop_score": data["interop_score"]})


# ------------------------------------------------------------------------------------- CI status, badge
DEVICE_PARAM = OpenApiParameter("device", str, enum=["cpu", "cuda"], description="platform (default: latest of any)")


class ImplementationStatus(APIView):
    """CI status payload of an implementation's latest submission: state, KC-C vector, counts, link."""

    @extend_schema(parameters=[DEVICE_PARAM], responses=OpenApiTypes.OBJECT)
    def get(self, request, pk):
        principal = request.principal
        implementation = selectors.get_implementation(principal, pk)
        payload = selectors.ci_status(principal, implementation, request.query_params.get("device"))
        if payload["link"]:
            payload["link"] = request.build_absolute_uri(payload["link"])
        return Response(payload)


class ImplementationBadge(APIView):
    """SVG badge of an implementation's latest conformance result."""

    @extend_schema(
        parameters=[DEVICE_PARAM],
        responses={(200, "image/svg+xml"): OpenApiResponse(OpenApiTypes.STR, description="SVG badge")},
    )
    def get(self, request, pk):
        principal = request.principal
        implementation = selectors.get_implementation(principal, pk)
        return badge_response(selectors.ci_status(principal, implementation, request.query_params.get("device")))


def badge_response(status: dict) -> HttpResponse:
    """The SVG badge of a CI status, never cached (a badge must follow the latest result)."""
    response = HttpResponse(selectors.badge_svg(status), content_type="image/svg+xml")
    response["Cache-Control"] = "no-cache, max-age=0"
    return response


PUBLIC_BADGE = inline_serializer(
    "PublicBadge",
    {
        "published": serializers.BooleanField(),
        "url": serializers.URLField(allow_null=True, help_text="anyone with this URL sees the badge, nothing else"),
        "markdown": serializers.CharField(allow_null=True, help_text="the badge as a Markdown image, for a README"),
    },
)


def public_badge_payload(request, implementation: Implementation) -> dict:
    if not implementation.badge_token:
        return {"published": False, "url": None, "markdown": None}
    url = request.build_absolute_uri(reverse("kernels:public-badge", args=[implementation.badge_token]))
    return {"published": True, "url": url, "markdown": f"![kernel contracts]({url})"}


class ImplementationPublicBadge(APIView):
    """The implementation's public badge URL, for a README: GET shows it (readers); POST publishes one — a new URL
    each time, which retires the previous one — and DELETE unpublishes it (submit role)."""

    def _implementation(self, request, pk, *, write: bool) -> Implementation:
        principal = request.principal
        implementation = selectors.get_implementation(principal, pk)
        if write and not principal.can_submit(implementation.project):
            raise exceptions.PermissionDenied(
                "Publishing a badge needs the submit role (owner or member) or an API key with the submit scope."
            )
        return implementation

    @extend_schema(responses=PUBLIC_BADGE)
    def get(self, request, pk):
        return Response(public_badge_payload(request, self._implementation(request, pk, write=False)))

    @extend_schema(request=None, responses={201: PUBLIC_BADGE})
    def post(self, request, pk):
        implementation = self._implementation(request, pk, write=True)
        services.publish_badge(implementation)
        return Response(public_badge_payload(request, implementation), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, pk):
        services.unpublish_badge(self._implementation(request, pk, write=True))
        return Response(status=status.HTTP_204_NO_CONTENT)
