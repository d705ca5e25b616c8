"""``GET /api/v1/runs/<id>/live/``: a growing run's live view for CI and scripts — the same JSON the run page's
websocket pushes (headline numbers of the steps so far, per-step series, the run against each budget rule)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.live.selectors import live_view
from audit_portal.runs.selectors import get_run

LIVE_VIEW = inline_serializer(
    "RunLiveView",
    {
        "run": serializers.IntegerField(),
        "steps": serializers.IntegerField(help_text="steps merged so far"),
        "first_step": serializers.IntegerField(allow_null=True),
        "last_step": serializers.IntegerField(allow_null=True),
        "ranks": serializers.ListField(
            child=serializers.DictField(),
            help_text="per process (rank) of the run: rank, "
            "steps (how many merged), ranges ([[first, last], …] of its steps)",
        ),
        "uploads": serializers.IntegerField(help_text="segments merged"),
        "merged_uploads": serializers.ListField(
            child=serializers.IntegerField(),
            help_text="their upload ids (a client waits for its segments to be merged before it reports the run)",
        ),
        "skipped_uploads": serializers.ListField(
            child=serializers.IntegerField(allow_null=True), help_text="the latest uploads left out (at most 20)"
        ),
        "summary": serializers.DictField(
            help_text="sequences, tokens, accepted, acceptance_rate, eps_hat, delta_hat, "
            "T_ref, threshold, data_errors of the run so far"
        ),
        "best_bound": serializers.FloatField(allow_null=True),
        "best_bound_id": serializers.CharField(allow_null=True),
        "series": serializers.DictField(
            help_text="per step: step, eps_hat_max, acceptance_rate, abs_diff_mean, abs_diff_p99, mis_mask_rate, k3"
        ),
        "budgets": serializers.ListField(
            child=serializers.DictField(), help_text="per enabled budget rule: rule, name, budget, meets"
        ),
        "firing": serializers.ListField(
            child=serializers.DictField(), help_text="rules firing for the run now: rule, name, value, message, since"
        ),
        "skipped": serializers.ListField(child=serializers.DictField(), help_text="uploads left out, with the reason"),
        "updated_at": serializers.DateTimeField(),
    },
)


class RunLive(APIView):
    """The live view of a run that streams steps (404 ``not_found`` before its first segment is merged)."""

    @extend_schema(responses={200: LIVE_VIEW})
    def get(self, request, pk):
        view = live_view(get_run(request.principal, pk))
        if view is None:
            raise exceptions.NotFound("This run has no streamed steps (no upload declared a step range yet).")
        return Response(view)
