"""REST endpoints for projects and API keys."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from audit_portal.accounts import selectors, services
from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.accounts.models import ApiKey, Project, Scope


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
        return selectors.projects_for(self.request.principal).order_by("-created_at")


class ProjectDetail(generics.RetrieveAPIView):
    serializer_class = ProjectSerializer

    def get_object(self):
        return self.request.project  # ProjectInScope looked it up (404 when the caller may not read it)


class CanManageProject(BasePermission):
    """The URL's project (``request.project``, set by ``ProjectInScope``) is one the caller owns, signed in."""

    message = "Managing API keys needs the owner role (signed in, not with a key)."

    def has_permission(self, request, view):
        return request.principal.can_manage(request.project)


MANAGE_PROJECT = [*api_settings.DEFAULT_PERMISSION_CLASSES, CanManageProject]


class ApiKeyListCreate(generics.ListAPIView):
    serializer_class = ApiKeySerializer
    permission_classes = MANAGE_PROJECT

    def get_queryset(self):
        return selectors.api_keys_for(self.request.principal, self.request.project)

    @extend_schema(
        request=ApiKeyCreateSerializer,
        responses={201: inline_serializer("IssuedKey", {"key": ApiKeySerializer(), "token": serializers.CharField()})},
    )
    def post(self, request, slug):
        body = ApiKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = services.issue_api_key(
            project=request.project, created_by=request.principal.user, **body.validated_data
        )
        return Response(
            {
                "key": ApiKeySerializer(issued.key).data,
                "token": issued.token,
                "note": "Store the token now: it is shown once and only its digest is kept.",
            },
            status=status.HTTP_201_CREATED,
        )


class ApiKeyRevoke(APIView):
    permission_classes = MANAGE_PROJECT

    @extend_schema(request=None, responses=ApiKeySerializer)
    def post(self, request, slug, pk):
        key = get_scoped_or_404(selectors.api_keys_for(request.principal, request.project), noun="API key", pk=pk)
        return Response(ApiKeySerializer(services.revoke_api_key(key)).data)
