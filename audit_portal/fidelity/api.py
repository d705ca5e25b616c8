"""REST endpoints for fidelity audits: reports, calls (filtered, cursor-paginated), a call's spans and tokens, the
loss-mask export, and the project's registered tokenizers."""

from __future__ import annotations

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, generics, serializers, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.accounts.throttling import WorkBudgetMixin
from audit_portal.core.errors import PortalError
from audit_portal.core.pagination import ByLinePagination
from audit_portal.fidelity import selectors, services, tokens
from audit_portal.fidelity.models import FidelityCall, FidelityReport, RegisteredTokenizer
from audit_portal.runs.selectors import get_run, get_upload


class ReportSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    mask_downloads = serializers.SerializerMethodField()
    headline = serializers.CharField(read_only=True)
    verdict_label = serializers.CharField(read_only=True)
    coverage_gate = serializers.SerializerMethodField()

    class Meta:
        model = FidelityReport
        fields = [
            "id",
            "project",
            "run",
            "upload",
            "mode",
            "headline",
            "verdict",
            "verdict_label",
            "coverage_gate",
            "verdict_reasons",
            "closed_failure_violations",
            "calls_total",
            "policy_tokens",
            "verifiable_policy_tokens",
            "verifiable_fraction",
            "spurious_call_rate",
            "coverage",
            "protocol_warnings",
            "tokenizers",
            "mask_export",
            "mask_downloads",
            "options",
            "created_at",
            "completed_at",
        ]
        read_only_fields = fields

    def get_coverage_gate(self, report) -> dict | None:
        """With ``?min_coverage=F`` (a fraction in [0, 1]): whether this report meets that CI gate; else null."""
        request = self.context.get("request")
        raw = request.query_params.get("min_coverage") if request is not None else None
        if raw in (None, ""):
            return None
        from workers.fidelity.verdict import check_min_coverage

        try:
            value = check_min_coverage(float(raw))
        except ValueError as exc:
            raise exceptions.ValidationError(
                {"min_coverage": [str(exc) if "min_coverage" in str(exc) else f"expected a number, got {raw!r}"]}
            )
        return report.coverage_gate(value)

    def get_mask_downloads(self, report) -> dict:
        return {
            fmt: f"/api/v1/fidelity/reports/{report.pk}/masks/?format={fmt}"
            for fmt in (report.mask_export.get("files") or {})
        }


class SpanField(serializers.JSONField):
    def to_representation(self, value):
        return [{"start": s, "end": e, "verifiable": not r, "reasons": r} for s, e, r in value]


class CallSerializer(serializers.ModelSerializer):
    spans = SpanField(read_only=True)

    class Meta:
        model = FidelityCall
        fields = [
            "id",
            "report",
            "line",
            "call_id",
            "trajectory_id",
            "call_index",
            "sample_id",
            "step",
            "role",
            "role_source",
            "purpose",
            "inferred_purpose",
            "verdict",
            "primary_reason",
            "reasons",
            "spans",
            "n_tokens",
            "verifiable_tokens",
            "loss_mask_used",
            "closed_failure_violations",
            "drift_if_retokenized",
            "lineage",
        ]
        read_only_fields = fields


class CallDetailSerializer(CallSerializer):
    class Meta(CallSerializer.Meta):
        fields = CallSerializer.Meta.fields + ["rules", "alignment", "certificate", "malformed"]
        read_only_fields = fields


class TokenizerSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = RegisteredTokenizer
        fields = ["id", "project", "name", "sha256", "kind", "size_bytes", "vocab_size", "uploaded_by", "created_at"]
        read_only_fields = fields


_MIN_COVERAGE = OpenApiParameter(
    "min_coverage",
    float,
    description="CI gate: fill `coverage_gate` — met when the closed-failure verdict passed and "
    "at least this fraction (0..1) of the policy tokens is verifiable",
)


@extend_schema(parameters=[_MIN_COVERAGE])
class ReportDetail(generics.RetrieveAPIView):
    """A fidelity report: coverage headline, verdict (and its label), closed-failure violations, the coverage
    (docs/fidelity-rules.md#coverage-report)
    report, tokenizers, mask export; ``?min_coverage=F`` adds a CI gate."""

    serializer_class = ReportSerializer

    def get_object(self):
        return selectors.get_report(self.request.principal, self.kwargs["pk"])


class RunReportDetail(ReportDetail):
    """The run's latest complete fidelity report."""

    def get_object(self):
        principal = self.request.principal
        report = selectors.latest_for_run(principal, get_run(principal, self.kwargs["pk"]))
        if report is None:
            raise exceptions.NotFound("This run has no fidelity report yet.")
        return report


class UploadReportDetail(ReportDetail):
    """The fidelity report of one upload (a CI job that just uploaded knows the upload id)."""

    def get_object(self):
        principal = self.request.principal
        upload = get_upload(principal, self.kwargs["pk"]).original
        report = selectors.reports_for(principal).filter(upload=upload).first()
        if report is None:
            raise exceptions.NotFound("This upload has no fidelity report yet.")
        return report


def _int_param(params, name):
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.lstrip("-").isdigit():
        raise PortalError(f"{name} must be an integer, got {raw!r}", code="invalid_parameter")
    return int(raw)


@extend_schema(
    parameters=[
        OpenApiParameter("verdict", str, enum=list(selectors.VERDICTS)),
        OpenApiParameter("reason", str, description="any listed reason code, e.g. SENTINEL_LOGPROB"),
        OpenApiParameter("primary_reason", str),
        OpenApiParameter("role", str, enum=["policy", "background", "unknown"]),
        OpenApiParameter("step", int),
        OpenApiParameter("page_size", int),
    ]
)
class ReportCalls(generics.ListAPIView):
    """Per-call summaries in file order, filterable by verdict, reason, primary reason, role and step."""

    serializer_class = CallSerializer
    pagination_class = ByLinePagination

    def get_queryset(self):
        report = selectors.get_report(self.request.principal, self.kwargs["pk"])
        p = self.request.query_params
        page_size = _int_param(p, "page_size")
        if page_size is not None and page_size < 1:
            raise PortalError("page_size must be at least 1", code="invalid_parameter")
        return selectors.calls(
            report,
            verdict=p.get("verdict"),
            reason=p.get("reason"),
            primary_reason=p.get("primary_reason"),
            role=p.get("role"),
            step=_int_param(p, "step"),
        )


class CallDetail(APIView):
    """One call: verdict, reasons, spans, rule outcomes, alignment and certificate counts; with ``tokens=true``
    also its tokens (read from the uploaded file, decoded with the project's matching tokenizer)."""

    @extend_schema(parameters=[OpenApiParameter("tokens", bool)], responses=CallDetailSerializer)
    def get(self, request, pk):
        call = selectors.get_call(request.principal, pk)
        data = CallDetailSerializer(call).data
        want = request.query_params.get("tokens")
        if want not in (None, "true", "false"):
            raise PortalError("tokens must be true or false", code="invalid_parameter")
        if want == "true":
            try:
                data["tokens"] = tokens.call_tokens(call, selectors.read_record(call))
            except selectors.RecordUnavailable as exc:
                raise PortalError(f"The call's record cannot be read: {exc}.", code="record_unavailable") from None
        return Response(data)


class _FormatIsOurs(DefaultContentNegotiation):
    """``?format=`` names the mask format here, not a DRF renderer: always answer (and err) in JSON."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class MaskDownload(APIView):
    """The loss-mask export (mask = verifiable ∧ policy response token): ``format=jsonl`` (one object per call) or
    ``bin`` (``FCRMASK1``, per call u16 id length, id, u32 n, packbits little-endian; docs/fidelity.md)."""

    content_negotiation_class = _FormatIsOurs

    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=list(services.MASK_FORMATS))],
        responses={
            (200, "application/x-ndjson"): OpenApiTypes.BINARY,
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
        },
    )
    def get(self, request, pk):
        report = selectors.get_report(request.principal, pk)
        fmt = request.query_params.get("format", "jsonl")
        if fmt not in services.MASK_FORMATS:
            raise PortalError(f"format must be jsonl or bin, got {fmt!r}", code="invalid_parameter")
        entry = (report.mask_export.get("files") or {}).get(fmt)
        path = services.artifact_path(entry["storage_name"]) if entry else None
        if path is None or not path.exists():
            raise exceptions.NotFound("This report has no loss-mask export in that format.")
        name = f"fidelity-masks-upload{report.upload_id}.{'jsonl' if fmt == 'jsonl' else 'bin'}"
        content_type = "application/x-ndjson" if fmt == "jsonl" else "application/octet-stream"
        return FileResponse(open(path, "rb"), as_attachment=True, filename=name, content_type=content_type)


class TokenizerListCreate(WorkBudgetMixin, generics.ListAPIView):
    """List the project's registered tokenizers, or register one (multipart ``file``: a Hugging Face
    ``tokenizer.json`` or a toy vocabulary, docs/fcr.md#toy-tokenizer; optional ``name``). The same tokenizer again
    returns the first (200)."""

    serializer_class = TokenizerSerializer
    parser_classes = [MultiPartParser]

    def get_queryset(self):
        return selectors.tokenizers_for(self.request.principal, self.request.project)

    @extend_schema(
        request={
            "multipart/form-data": inline_serializer(
                "TokenizerUpload", {"file": serializers.FileField(), "name": serializers.CharField(required=False)}
            )
        },
        responses={
            201: TokenizerSerializer,
            200: OpenApiResponse(TokenizerSerializer, description="already registered"),
        },
    )
    def post(self, request, slug):
        principal, project = request.principal, request.project
        if not principal.can_submit(project):
            raise exceptions.PermissionDenied("Registering a tokenizer needs the submit role (or a submit-scoped key).")
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
        if declared > services.TOKENIZER_MAX_BYTES + 64 * 1024:
            raise PortalError(
                f"The tokenizer file is larger than {services.TOKENIZER_MAX_BYTES >> 20} MiB.",
                code="tokenizer_too_large",
            )
        received = [f for key in request.FILES for f in request.FILES.getlist(key)]
        try:
            uploaded = request.FILES.get("file")
            if uploaded is None:
                raise PortalError(
                    "Send the tokenizer as multipart/form-data in a field named 'file'.", code="file_missing"
                )
            tok, created = services.register_uploaded_tokenizer(
                project=project, uploaded=uploaded, name=request.data.get("name"), uploaded_by=principal.label
            )
        finally:
            for f in received:  # the hashing upload handler leaves the bytes in the artifact store's incoming/
                discard = getattr(f, "discard", None)
                if discard is not None:
                    discard()
        return Response(
            TokenizerSerializer(tok).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )
