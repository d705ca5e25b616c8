"""The sign-in form, with failed attempts rate-limited (``throttling.LoginThrottle``)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from audit_portal.accounts.throttling import LoginThrottle


class ThrottledAuthenticationForm(AuthenticationForm):
    throttle = LoginThrottle()

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        if username and self.throttle.locked(username):
            minutes = max(1, settings.LOGIN_FAILURE_WINDOW_SECONDS // 60)
            raise ValidationError(
                f"Too many failed sign-ins for this account. Try again in {minutes} minutes.", code="throttled"
            )
        try:
            return super().clean()
        except ValidationError:
            if username:
                self.throttle.failed(username)
            raise
