"""REST endpoints for jobs."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, generics, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.core.errors import PortalError
from audit_portal.jobs import selectors, services
from audit_portal.jobs.models import Job


class OutcomeSerializer(serializers.Serializer):
    text = serializers.CharField(help_text="the state in plain words, e.g. 'finished: invalid (3 errors)'")
    tone = serializers.CharField(help_text="valid | invalid | running | queued | cancelled | duplicate")
    product = serializers.CharField(required=False, help_text="what the finished job produced")
    product_url = serializers.CharField(required=False, help_text="the page that shows it")


class JobSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    outcome = OutcomeSerializer(read_only=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "project",
            "kind",
            "title",
            "queue",
            "state",
            "progress",
            "message",
            "error",
            "result",
            "attempts",
            "subject_kind",
            "subject_id",
            "submitted_by",
            "created_at",
            "started_at",
            "finished_at",
            "updated_at",
            "outcome",
        ]
        read_only_fields = fields


class JobDetail(generics.RetrieveAPIView):
    serializer_class = JobSerializer

    def get_object(self):
        return selectors.get_job(self.request.principal, self.kwargs["pk"])


class ProjectJobList(generics.ListAPIView):
    serializer_class = JobSerializer

    def get_queryset(self):
        qs = selectors.jobs_for(self.request.principal, self.request.project)
        state = self.request.query_params.get("state")
        return qs.filter(state=state) if state else qs


class JobCancel(APIView):
    @extend_schema(request=None, responses=JobSerializer)
    def post(self, request, pk):
        principal = request.principal
        job = selectors.get_job(principal, pk)
        if not principal.can_submit(job.project):
            raise exceptions.PermissionDenied("Cancelling a job needs the submit role or scope.")
        if not services.cancel_job(job):
            raise PortalError(f"Job {job.pk} is already {job.state}.", code="job_finished")
        job.refresh_from_db()
        return Response(JobSerializer(job).data)
