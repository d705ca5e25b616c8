"""``/api/v1/`` endpoints for the runs table: the same rows, filters and sort as the page (dashboards/tables.py), with
each run's latest certificate's numbers and verdict, and the CSV/JSON export with an API key."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import exceptions, generics, serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.views import APIView

from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.core.errors import PortalError
from audit_portal.dashboards import tables
from audit_portal.runs import selectors as run_selectors
from audit_portal.runs.api import RunStartMixin


class RunRowSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    project = serializers.CharField(source="project.slug")
    name = serializers.CharField()
    config = serializers.JSONField(help_text="the trainer's configuration, as the client declared it")
    tags = serializers.JSONField()
    state = serializers.CharField()
    missing_steps = serializers.JSONField(help_text="steps the client could not log (a counted gap)")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    certificate_id = serializers.IntegerField(allow_null=True)
    verdict = serializers.CharField(
        allow_null=True,
        help_text="the latest certificate's verdict code "
        "(certified, over_budget, vacuous, data_errors, not_verifiable); null: none yet",
    )
    verdict_detail = serializers.JSONField(allow_null=True, help_text="label, sentence and what would change it")
    eps_hat = serializers.FloatField(allow_null=True)
    delta_hat = serializers.FloatField(allow_null=True)
    acceptance = serializers.FloatField(allow_null=True)
    best_bound = serializers.FloatField(allow_null=True)
    coverage = serializers.FloatField(allow_null=True)
    tokens = serializers.IntegerField(allow_null=True)
    steps = serializers.IntegerField(allow_null=True)
    duration = serializers.SerializerMethodField(help_text="seconds from the run's creation to its last update")

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_duration(self, row) -> float | None:
        value = getattr(row, "duration", None)
        return None if value is None else value.total_seconds()


class RunPages(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


FILTERS = [
    OpenApiParameter(
        "q",
        str,
        description="the search language (docs/portal.md#searching-runs), e.g. "
        "'verdict = certified and best_bound < 0.5 and params.lr = 1e-5 and tag:grpo'; "
        "text without operators: run name contains",
    ),
    OpenApiParameter("verdict", str, enum=tables.VERDICTS),
    OpenApiParameter(
        "sort", str, description=f"one of {', '.join(tables.SORT_KEYS)} or params.<config key>, '-' for descending"
    ),
]
FILTERS += [
    OpenApiParameter(f"{side}_{c.key}", str, description=f"{side}imum {c.label} (inclusive)")
    for c in tables.RANGE_COLUMNS
    for side in ("min", "max")
]


def _filtered_rows(request):
    rows = tables.runs_table(run_selectors.runs_for(request.principal, request.project))
    try:
        return tables.filter_runs(rows, request.query_params)[0]
    except tables.TableInputError as exc:
        raise PortalError(str(exc), code="invalid_parameter") from None


@extend_schema(parameters=FILTERS)
class ProjectRunList(RunStartMixin, generics.ListAPIView):
    """The project's runs with their latest certificate's numbers and verdict; the runs table's filters and sort.
    ``POST`` starts or resumes a run (runs/api.py)."""

    serializer_class = RunRowSerializer
    pagination_class = RunPages

    def get_queryset(self):
        return _filtered_rows(self.request).select_related("project")


class RunDetail(generics.RetrieveAPIView):
    """One run with its latest certificate's numbers and verdict."""

    serializer_class = RunRowSerializer

    def get_object(self):
        rows = tables.runs_table(run_selectors.runs_for(self.request.principal)).select_related("project")
        return get_scoped_or_404(rows, pk=self.kwargs["pk"])  # "No such run." outside the caller's projects


@extend_schema(parameters=FILTERS, responses={(200, "text/csv"): str, (200, "application/json"): str})
class ProjectRunExport(APIView):
    """Every run the filters keep, streamed as CSV (``runs.csv``) or a JSON array (``runs.json``)."""

    def get(self, request, slug, fmt):
        if fmt not in ("csv", "json"):
            raise exceptions.NotFound(f"export as runs.csv or runs.json, not runs.{fmt}")
        rows = _filtered_rows(request)
        return tables.export_rows(rows.iterator(chunk_size=500), tables.EXPORT_RUN_COLUMNS, fmt, f"{slug}-runs")
