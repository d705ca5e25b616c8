"""REST endpoints for run certificates."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.certificates import figures, selectors
from audit_portal.certificates.models import RunCertificate, SequenceSummary
from audit_portal.core.errors import PortalError
from audit_portal.core.pagination import ByLinePagination
from audit_portal.runs.selectors import get_run


class CertificateSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    covers = serializers.SerializerMethodField(
        help_text="'upload': this certificate covers its upload; 'segment': its upload is one segment of a run "
        "streamed in steps, so it covers those steps only — the run as a whole is its live view (live_view)"
    )
    live_view = serializers.SerializerMethodField(help_text="the run's live view, when the upload is a segment")
    verdict = serializers.JSONField(source="verdict_detail", read_only=True)

    class Meta:
        model = RunCertificate
        fields = [
            "id",
            "project",
            "run",
            "upload",
            "summary",
            "bounds",
            "budget",
            "length_buckets",
            "histograms",
            "errors",
            "caveats",
            "options",
            "tokens",
            "sequences",
            "acceptance_rate",
            "eps_hat",
            "delta_hat",
            "best_bound",
            "best_bound_id",
            "data_errors",
            "created_at",
            "completed_at",
            "covers",
            "live_view",
            "verdict",
        ]
        read_only_fields = fields

    @staticmethod
    def _is_segment(obj) -> bool:
        return hasattr(obj.upload, "live_segment")  # a reverse one-to-one: absent for a plain upload

    def get_covers(self, obj) -> str:
        return "segment" if self._is_segment(obj) else "upload"

    def get_live_view(self, obj) -> str | None:
        return f"/api/v1/runs/{obj.run_id}/live/" if self._is_segment(obj) and obj.run_id else None


class SequenceSerializer(serializers.ModelSerializer):
    class Meta:
        model = SequenceSummary
        fields = [
            "id",
            "call_id",
            "trajectory_id",
            "step",
            "line",
            "length",
            "status",
            "accept",
            "eps_hat",
            "delta_hat",
            "tv_lo_max",
            "mean_k3",
            "max_k2",
            "a_y",
            "reason",
        ]
        read_only_fields = fields


class CertificateDetail(generics.RetrieveAPIView):
    serializer_class = CertificateSerializer

    def get_object(self):
        return selectors.get_certificate(self.request.principal, self.kwargs["pk"])


class RunCertificateDetail(generics.RetrieveAPIView):
    """The run's latest complete certificate."""

    serializer_class = CertificateSerializer

    def get_object(self):
        principal = self.request.principal
        certificate = selectors.latest_for_run(principal, get_run(principal, self.kwargs["pk"]))
        if certificate is None:
            raise exceptions.NotFound("This run has no certificate yet.")
        return certificate


@extend_schema(
    parameters=[
        OpenApiParameter("status", str, enum=["CERT_IN", "CERT_OUT", "UNDETERMINED", "HEURISTIC", "DATA_ERROR"]),
        OpenApiParameter("step", int),
        OpenApiParameter("accepted", bool),
    ]
)
class CertificateSequences(generics.ListAPIView):
    """Per-sequence summaries, filterable by status, step and acceptance; cursor-paginated by line."""

    serializer_class = SequenceSerializer
    pagination_class = ByLinePagination

    def get_queryset(self):
        certificate = selectors.get_certificate(self.request.principal, self.kwargs["pk"])
        params = self.request.query_params
        step = params.get("step")
        if step is not None and not step.lstrip("-").isdigit():
            raise PortalError(f"step must be an integer, got {step!r}", code="invalid_parameter")
        accepted = params.get("accepted")
        if accepted is not None and accepted not in ("true", "false"):
            raise PortalError("accepted must be true or false", code="invalid_parameter")
        return selectors.sequences(
            certificate,
            status=params.get("status"),
            step=int(step) if step else None,
            accepted=None if accepted is None else accepted == "true",
        )


def _budget(request) -> float:
    raw = request.query_params.get("budget", "0.1")
    try:
        budget = float(raw)
    except ValueError:
        raise PortalError(f"budget must be a number, got {raw!r}", code="invalid_parameter") from None
    if not 0 < budget < 1e9:
        raise PortalError("budget must be positive", code="invalid_parameter")
    return budget


class CertificateFigures(APIView):
    """The run page's figures as Plotly JSON; ``budget`` sets the error budget line and thresholds."""

    @extend_schema(parameters=[OpenApiParameter("budget", float)], responses=dict)
    def get(self, request, pk):
        certificate = selectors.get_certificate(request.principal, pk)
        return HttpResponse(figures.page_figures_json(certificate, _budget(request)), content_type="application/json")


class CertificateComparison(APIView):
    """Two certificates side by side: headline numbers, every bound, and the differences (b − a)."""

    @extend_schema(
        parameters=[OpenApiParameter("a", int, required=True), OpenApiParameter("b", int, required=True)],
        responses=dict,
    )
    def get(self, request):
        principal = request.principal
        try:
            a_id, b_id = int(request.query_params["a"]), int(request.query_params["b"])
        except (KeyError, ValueError):
            raise PortalError("give two certificate ids: ?a=<id>&b=<id>", code="invalid_parameter") from None
        a, b = selectors.get_certificate(principal, a_id), selectors.get_certificate(principal, b_id)
        return Response(selectors.compare(a, b))
