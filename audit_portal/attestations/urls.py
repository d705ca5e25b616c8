from django.http import JsonResponse
from django.urls import path

from audit_portal.attestations.keys import key_set


def well_known_keys(request):
    """The key set at a stable, unauthenticated URL (same body as ``/api/v1/keys/``)."""
    return JsonResponse(key_set())


urlpatterns = [path(".well-known/audit-portal-keys.json", well_known_keys, name="well-known-keys")]
