"""Production error pages: with DEBUG off a missing page is the portal's own 404 (never Django's list of URL
patterns), a server error is the plain 500 page, and under /api/ both are JSON."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import path

from audit_portal import urls as portal_urls

pytestmark = pytest.mark.django_db


def _boom(request):
    raise RuntimeError("a bug")


urlpatterns = [path("boom/", _boom), path("api/v1/boom/", _boom), *portal_urls.urlpatterns]
handler404 = portal_urls.handler404
handler500 = portal_urls.handler500


def test_missing_pages_never_list_the_url_patterns(client, owner, settings):
    settings.DEBUG = False
    client.force_login(owner)
    page = client.get("/no/such/page/")
    html = page.content.decode()
    assert page.status_code == 404 and "This page does not exist" in html
    assert "URLconf" not in html and "api/v1/" not in html
    api = client.get("/api/v1/no-such-thing/")
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"


def test_a_server_error_is_the_plain_page_or_json(settings):
    settings.DEBUG = False
    settings.ROOT_URLCONF = __name__
    client = Client(raise_request_exception=False)
    page = client.get("/boom/")
    assert page.status_code == 500 and "Something went wrong on our side" in page.content.decode()
    assert "a bug" not in page.content.decode() and "Traceback" not in page.content.decode()
    api = client.get("/api/v1/boom/")
    assert api.status_code == 500 and api["Content-Type"].startswith("application/json")
    assert api.json()["error"]["code"] == "server_error"
