from rest_framework.permissions import BasePermission

from audit_portal.accounts.principal import Principal


class IsAuthenticatedPrincipal(BasePermission):
    """A signed-in user or a valid API key; project-level checks happen in selectors and services."""

    def has_permission(self, request, view):
        return not Principal.from_request(request).is_anonymous
