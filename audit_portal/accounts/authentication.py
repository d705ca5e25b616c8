"""DRF authentication by project API key: ``Authorization: Bearer ap_<prefix>_<secret>``."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from rest_framework import authentication, exceptions

from audit_portal.accounts.services import authenticate_token


class ApiKeyUser(AnonymousUser):
    """The user object a key-authenticated request carries: authenticated, but no person."""

    @property
    def is_authenticated(self):
        return True


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        if len(parts) != 2 or parts[0] not in (self.keyword, "Token"):
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <api key>'.")
        key = authenticate_token(parts[1])
        if key is None:
            raise exceptions.AuthenticationFailed("API key is unknown, revoked or expired.")
        return ApiKeyUser(), key

    def authenticate_header(self, request):
        return self.keyword
