"""API keys: shown once, stored hashed, scoped, revocable, expiring."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit_portal.accounts.models import ApiKey
from audit_portal.accounts.services import authenticate_token, issue_api_key, revoke_api_key

pytestmark = pytest.mark.django_db


def test_token_is_returned_once_and_only_its_digest_is_stored(project, owner):
    issued = issue_api_key(project=project, name="ci", scopes=["read"], created_by=owner)
    row = ApiKey.objects.get(pk=issued.key.pk)
    assert issued.token.startswith("ap_") and row.prefix in issued.token
    assert issued.token not in (row.secret_sha256, row.prefix)
    for field in ApiKey._meta.fields:
        assert issued.token != str(getattr(row, field.attname))
    assert authenticate_token(issued.token) == row


def test_wrong_revoked_and_expired_tokens_do_not_authenticate(project, owner):
    issued = issue_api_key(project=project, name="ci", scopes=["read"], created_by=owner)
    assert authenticate_token(issued.token[:-1] + ("A" if issued.token[-1] != "A" else "B")) is None
    assert authenticate_token("ap_nothere_secret") is None
    revoke_api_key(issued.key)
    assert authenticate_token(issued.token) is None
    expired = issue_api_key(
        project=project, name="old", scopes=["read"], expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert authenticate_token(expired.token) is None


def test_scopes_must_be_known_and_non_empty(project):
    with pytest.raises(ValueError):
        issue_api_key(project=project, name="x", scopes=[])
    with pytest.raises(ValueError):
        issue_api_key(project=project, name="x", scopes=["admin"])


def test_owner_creates_and_revokes_keys_over_the_api(client, project, owner):
    client.force_login(owner)
    response = client.post(
        f"/api/v1/projects/{project.slug}/api-keys/",
        {"name": "ci", "scopes": ["read"]},
        content_type="application/json",
    )
    assert response.status_code == 201
    token, key_id = response.json()["token"], response.json()["key"]["id"]
    listed = client.get(f"/api/v1/projects/{project.slug}/api-keys/").json()["results"]
    assert [k["id"] for k in listed] == [key_id] and "token" not in listed[0]
    assert client.post(f"/api/v1/projects/{project.slug}/api-keys/{key_id}/revoke/").status_code == 200
    assert authenticate_token(token) is None


def test_members_and_keys_cannot_manage_keys(client, project, member_of, submit_token):
    client.force_login(member_of(project))
    assert client.get(f"/api/v1/projects/{project.slug}/api-keys/").status_code == 403
    client.logout()
    response = client.get(f"/api/v1/projects/{project.slug}/api-keys/", HTTP_AUTHORIZATION=f"Bearer {submit_token}")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"


def test_the_keys_page_shows_a_new_token_once_after_a_redirect(client, project, owner):
    from audit_portal.accounts.models import ApiKey

    client.force_login(owner)
    page = f"/p/{project.slug}/keys/"
    r = client.post(page, {"name": "ci", "scopes": ["read"]}, follow=True)
    assert r.redirect_chain == [(page, 302)]  # POST-redirect-GET: a reload issues no second key
    html = r.content.decode()
    token = html.split('<div class="token" id="new-token">')[1].split("</div>")[0]
    assert len(token) > 20 and ApiKey.objects.filter(project=project, name="ci").count() == 1
    assert token not in client.get(page).content.decode()  # shown once
    assert 'data-confirm="Revoke the key' in html  # revoking asks first
