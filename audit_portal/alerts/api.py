"""REST endpoints for alerts. CI reads a rule's state per run (``GET /api/v1/runs/<id>/alerts/`` answers, for every
rule of the run's project, whether it is firing for that run); creating and deleting rules needs the submit role or
a submit-scoped key. Every read is scoped to the caller's projects (a foreign rule or run is a 404)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.alerts import rules, selectors, services
from audit_portal.alerts.models import AlertRule, AlertState, WebhookDelivery
from audit_portal.core.parsers import BoundedJSONParser
from audit_portal.runs.selectors import get_run


class AlertStateSerializer(serializers.ModelSerializer):
    run_name = serializers.CharField(source="run.name", read_only=True)
    state = serializers.SerializerMethodField()

    class Meta:
        model = AlertState
        fields = ["run", "run_name", "state", "firing", "value", "message", "fired_count", "changed_at", "evaluated_at"]
        read_only_fields = fields

    def get_state(self, state) -> str:
        return "firing" if state.firing else "armed"


class DeliverySerializer(serializers.ModelSerializer):
    event = serializers.IntegerField(source="event_id", read_only=True)
    run = serializers.IntegerField(source="event.run_id", read_only=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event",
            "run",
            "url",
            "state",
            "attempts",
            "last_status",
            "last_error",
            "last_seconds",
            "created_at",
            "last_attempt_at",
            "next_attempt_at",
            "finished_at",
        ]
        read_only_fields = fields


class AlertRuleSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    condition = serializers.SerializerMethodField()
    firing_runs = serializers.SerializerMethodField()
    states = serializers.SerializerMethodField()

    class Meta:
        model = AlertRule
        fields = [
            "id",
            "project",
            "name",
            "kind",
            "condition",
            "threshold",
            "window",
            "webhook_url",
            "enabled",
            "created_by",
            "created_at",
            "firing_runs",
            "states",
        ]
        read_only_fields = fields

    def get_condition(self, rule) -> str:
        return rules.KINDS[rule.kind]

    def get_firing_runs(self, rule) -> list[int]:
        return list(rule.states.filter(firing=True).values_list("run_id", flat=True))

    def get_states(self, rule) -> list[dict]:
        return AlertStateSerializer(selectors.states_of(rule), many=True).data


class AlertRuleDetailSerializer(AlertRuleSerializer):
    deliveries = serializers.SerializerMethodField()

    class Meta(AlertRuleSerializer.Meta):
        fields = [*AlertRuleSerializer.Meta.fields, "deliveries"]
        read_only_fields = fields

    def get_deliveries(self, rule) -> list[dict]:
        recent = WebhookDelivery.objects.filter(event__rule=rule).select_related("event")[:20]
        return DeliverySerializer(recent, many=True).data


class CreatedRuleSerializer(AlertRuleSerializer):
    secret = serializers.CharField(read_only=True, help_text="the HMAC key of the webhook signature; shown only here")

    class Meta(AlertRuleSerializer.Meta):
        fields = [*AlertRuleSerializer.Meta.fields, "secret"]
        read_only_fields = fields


RULE_REQUEST = inline_serializer(
    "AlertRuleRequest",
    {
        "name": serializers.CharField(max_length=100),
        "kind": serializers.ChoiceField(
            choices=rules.KIND_CHOICES, help_text="; ".join(f"{k}: {v}" for k, v in rules.KINDS.items())
        ),
        "threshold": serializers.FloatField(
            help_text="budget (budget), rise per step (eps_rising, abs_diff_rising), mask rate (mask_rate)"
        ),
        "window": serializers.IntegerField(required=False, default=5, help_text="N: the last N steps"),
        "webhook_url": serializers.CharField(
            required=False,
            allow_blank=True,
            help_text="http(s) receiver of signed events; public addresses only unless "
            "the deployment sets ALERT_WEBHOOK_ALLOW_PRIVATE",
        ),
        "enabled": serializers.BooleanField(required=False, default=True),
    },
)


class ProjectAlertRuleListCreate(generics.ListAPIView):
    """A project's alert rules with their state per run, newest first; POST creates one (a 400
    ``invalid_alert_rule`` whose ``detail.field`` names the bad field)."""

    serializer_class = AlertRuleSerializer
    parser_classes = [BoundedJSONParser]

    def get_queryset(self):
        return selectors.rules_for(self.request.principal, self.request.project)

    @extend_schema(request=RULE_REQUEST, responses={201: CreatedRuleSerializer})
    def post(self, request, slug):
        principal, project = request.principal, request.project
        if not principal.can_submit(project):
            raise exceptions.PermissionDenied("Creating an alert rule needs the submit role or a submit-scoped key.")
        rule = services.create_rule(project=project, data=request.data, created_by=principal.label)
        return Response(CreatedRuleSerializer(rule).data, status=status.HTTP_201_CREATED)


RULE_CHANGE = inline_serializer(
    "AlertRuleChange",
    {
        "name": serializers.CharField(max_length=100, required=False),
        "kind": serializers.ChoiceField(choices=rules.KIND_CHOICES, required=False),
        "threshold": serializers.FloatField(required=False),
        "window": serializers.IntegerField(required=False),
        "webhook_url": serializers.CharField(required=False, allow_blank=True),
        "enabled": serializers.BooleanField(required=False),
    },
)  # any of a new rule's fields; the others keep their values


class AlertRuleDetail(generics.RetrieveDestroyAPIView):
    """One rule: its state per run and its latest webhook deliveries. PATCH changes some of its fields, DELETE removes
    it (submit role). A changed condition or a rule enabled again starts it afresh (docs/alerts.md)."""

    serializer_class = AlertRuleDetailSerializer
    parser_classes = [BoundedJSONParser]

    def get_object(self):
        return selectors.get_rule(self.request.principal, self.kwargs["pk"])

    @extend_schema(request=RULE_CHANGE, responses={200: AlertRuleDetailSerializer})
    def patch(self, request, pk):
        rule = self.get_object()
        if not request.principal.can_submit(rule.project):
            raise exceptions.PermissionDenied("Changing an alert rule needs the submit role or a submit-scoped key.")
        return Response(AlertRuleDetailSerializer(services.update_rule(rule, request.data)).data)

    def perform_destroy(self, rule):
        if not self.request.principal.can_submit(rule.project):
            raise exceptions.PermissionDenied("Deleting an alert rule needs the submit role or a submit-scoped key.")
        services.delete_rule(rule)


class AlertRuleSecret(APIView):
    """POST: a new webhook signing secret for the rule, shown in this answer only (submit role). The old secret signs
    nothing more; receivers must be given the new one."""

    @extend_schema(request=None, responses={200: CreatedRuleSerializer})
    def post(self, request, pk):
        principal = request.principal
        rule = selectors.get_rule(principal, pk)
        if not principal.can_submit(rule.project):
            raise exceptions.PermissionDenied("Rotating a rule's secret needs the submit role or a submit-scoped key.")
        return Response(CreatedRuleSerializer(services.rotate_secret(rule)).data)


RUN_ALERTS = inline_serializer(
    "RunAlerts",
    {
        "run": serializers.IntegerField(),
        "firing": serializers.BooleanField(help_text="true when any enabled rule is firing for this run (a CI gate)"),
        "rules": inline_serializer(
            "RunAlertRule",
            {
                "rule": serializers.IntegerField(),
                "name": serializers.CharField(),
                "kind": serializers.CharField(),
                "threshold": serializers.FloatField(),
                "window": serializers.IntegerField(),
                "state": serializers.ChoiceField(choices=["firing", "armed", "not_evaluated"]),
                "value": serializers.FloatField(allow_null=True),
                "message": serializers.CharField(),
                "fired_count": serializers.IntegerField(),
                "changed_at": serializers.DateTimeField(allow_null=True),
            },
            many=True,
        ),
    },
)


class RunAlerts(APIView):
    """Every enabled rule of the run's project with its state for this run."""

    @extend_schema(responses={200: RUN_ALERTS})
    def get(self, request, pk):
        principal = request.principal
        run = get_run(principal, pk)
        states = selectors.states_for_run(run)
        out = []
        for rule in selectors.rules_for(principal, run.project).filter(enabled=True).order_by("pk"):
            s = states.get(rule.pk)
            out.append(
                {
                    "rule": rule.pk,
                    "name": rule.name,
                    "kind": rule.kind,
                    "threshold": rule.threshold,
                    "window": rule.window,
                    "state": "not_evaluated" if s is None else "firing" if s.firing else "armed",
                    "value": s.value if s else None,
                    "message": s.message if s else "",
                    "fired_count": s.fired_count if s else 0,
                    "changed_at": s.changed_at if s else None,
                }
            )
        return Response({"run": run.pk, "firing": any(r["state"] == "firing" for r in out), "rules": out})
