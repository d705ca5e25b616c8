"""REST endpoints for projects and API keys."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.accounts import selectors, services
from audit_portal.accounts.models import ApiKey, Project, Scope
from audit_portal.accounts.principal import Principal


class ProjectSerializer(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = ["slug", "name", "description", "created_at"]
        read_only_fields = fields


class ApiKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at"]
        read_only_fields = fields


class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=Scope.choices), allow_empty=False)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class ProjectList(generics.ListAPIView):
    serializer_class = ProjectSerializer

    def get_queryset(self):
        return selectors.projects_for(Principal.from_request(self.request)).order_by("-created_at")


class ProjectDetail(generics.RetrieveAPIView):
    serializer_class = ProjectSerializer

    def get_object(self):
        return selectors.get_project(Principal.from_request(self.request), self.kwargs["slug"])


def _managed_project(request, slug) -> tuple[Principal, Project]:
    principal = Principal.from_request(request)
    project = selectors.get_project(principal, slug)
    if not principal.can_manage(project):
        raise exceptions.PermissionDenied("Managing API keys needs the owner role (signed in, not with a key).")
    return principal, project


class ApiKeyListCreate(generics.ListAPIView):
    serializer_class = ApiKeySerializer

    def get_queryset(self):
        principal, project = _managed_project(self.request, self.kwargs["slug"])
        return selectors.api_keys_for(principal, project)

    @extend_schema(
        request=ApiKeyCreateSerializer,
        responses={201: inline_serializer("IssuedKey", {"key": ApiKeySerializer(), "token": serializers.CharField()})},
    )
    def post(self, request, slug):
        principal, project = _managed_project(request, slug)
        body = ApiKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = services.issue_api_key(project=project, created_by=principal.user, **body.validated_data)
        return Response(
            {
                "key": ApiKeySerializer(issued.key).data,
                "token": issued.token,
                "note": "Store the token now: it is shown once and only its digest is kept.",
            },
            status=status.HTTP_201_CREATED,
        )


class ApiKeyRevoke(APIView):
    @extend_schema(request=None, responses=ApiKeySerializer)
    def post(self, request, slug, pk):
        principal, project = _managed_project(request, slug)
        key = get_object_or_404(selectors.api_keys_for(principal, project), pk=pk)
        return Response(ApiKeySerializer(services.revoke_api_key(key)).data)
