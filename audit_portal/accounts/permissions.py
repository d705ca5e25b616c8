"""Who is asking and in which project, resolved once per API request.

DRF authenticates first (``ApiKeyAuthentication``, then the session), then runs these permission classes in order,
before the view and before the throttles. ``IsAuthenticatedPrincipal`` turns what authentication found into one
``Principal`` and keeps it as ``request.principal``; ``ProjectInScope`` turns the project slug of the URL into
``request.project``. Views, serializers and throttles read those two attributes and never resolve the caller again.
(Resolution sits in a permission class rather than in the authentication classes because DRF's
``force_authenticate`` — the tests' way in — replaces the authentication classes but keeps the permissions.)
"""

from rest_framework.permissions import BasePermission

from audit_portal.accounts.principal import Principal
from audit_portal.accounts.selectors import get_project


class IsAuthenticatedPrincipal(BasePermission):
    """A signed-in user or a valid API key; what each may do in a project is checked by ``ProjectInScope`` and in
    the selectors and services."""

    def has_permission(self, request, view):
        request.principal = Principal.from_request(request)
        return not request.principal.is_anonymous


class ProjectInScope(BasePermission):
    """A route that names a project (``<slug:slug>``) sets ``request.project``, or answers 404 when the caller may
    not read it — the same answer as for a project that does not exist, so a stranger learns nothing. It runs after
    ``IsAuthenticatedPrincipal`` (an anonymous caller gets 401/403, never a lookup)."""

    def has_permission(self, request, view):
        slug = view.kwargs.get("slug")
        if slug is not None:
            request.project = get_project(request.principal, slug)
        return True
