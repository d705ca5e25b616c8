"""Passwords as production hashes them. The test processes hash with MD5 (tests/conftest.py: Django's advice for a
suite, 0.23 s of CPU per PBKDF2 hash here), so this test puts the shipped settings' hashers back — Django's
defaults, PBKDF2 first, which settings.py does not override — and signs a user in through the login form."""

from __future__ import annotations

import pytest
from django.conf import global_settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_a_password_set_with_the_shipped_hashers_signs_in(settings):
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    user = get_user_model().objects.create_user("hash-check", password="a long enough passphrase")
    assert user.password.startswith("pbkdf2_sha256$")
    client = Client()
    refused = client.post(reverse("login"), {"username": "hash-check", "password": "not the passphrase"})
    assert refused.status_code == 200 and "_auth_user_id" not in client.session
    accepted = client.post(reverse("login"), {"username": "hash-check", "password": "a long enough passphrase"})
    assert accepted.status_code == 302 and client.session["_auth_user_id"] == str(user.pk)
