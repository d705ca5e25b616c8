"""Rate limits on the API's writes that cost a worker: uploads (tests/portal/runs/test_upload_api.py), kernel
submissions, tokenizer registrations and training-step audits share one budget per API key or user
(UPLOAD_THROTTLE_RATE); reads are not limited. Also the sign-in lockout."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache

from audit_portal.accounts.models import Role
from audit_portal.fidelity.models import RegisteredTokenizer
from audit_portal.kernels import services
from audit_portal.kernels.models import Submission
from audit_portal.training.models import TrainingAudit
from workers.contracts.loader import SPECS_DIR

from ..conftest import as_file, jsonl, records, upload_url
from ..pipelines.test_fidelity_job import TOY_VOCAB_TEXT
from ..training.test_training_api import TINY

pytestmark = pytest.mark.django_db


@pytest.fixture
def limited(settings):
    settings.UPLOAD_THROTTLE_RATE = "3/min"
    cache.clear()
    yield
    cache.clear()


def test_kernel_submissions_share_the_per_key_budget_with_uploads(api, project, limited):
    services.store_contracts(services.parse_contract_files(sorted(SPECS_DIR.glob("C-PRC-01*.yaml"))))
    url = f"/api/v1/projects/{project.slug}/kernel-submissions/"
    body = {"impl": "pkg.kernels", "contracts": ["C-PRC-01"]}
    assert api.post(upload_url(project), {"file": as_file(jsonl(records()))}, format="multipart").status_code == 201
    statuses = [api.post(url, body, format="json").status_code for _ in range(3)]
    assert statuses == [201, 201, 429]
    refused = api.post(url, body, format="json")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "throttled"
    assert refused.json()["error"]["retry_after_seconds"] > 0
    assert Submission.objects.count() == 2
    assert api.get(url).status_code == 200  # reading is not limited


def test_tokenizers_and_training_audits_draw_on_the_same_budget(api, project, limited):
    tokenizers = f"/api/v1/projects/{project.slug}/tokenizers/"
    audits = f"/api/v1/projects/{project.slug}/training-audits/"

    def register():
        return api.post(tokenizers, {"file": as_file(TOY_VOCAB_TEXT.encode(), "v.json")}, format="multipart")

    assert register().status_code == 201
    assert [api.post(audits, TINY, format="json").status_code for _ in range(3)] == [201, 201, 429]
    refused = register()
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "throttled"
    assert (
        TrainingAudit.objects.count() == 2 and RegisteredTokenizer.objects.count() == 1
    )  # nothing stored when refused
    assert api.get(tokenizers).status_code == 200 and api.get(audits).status_code == 200


def test_the_signed_in_forms_draw_on_the_same_budget(client, project, member_of, limited):
    client.force_login(member_of(project, Role.MEMBER))
    services.store_contracts(services.parse_contract_files(sorted(SPECS_DIR.glob("C-PRC-01*.yaml"))))
    training = {k: (",".join(v) if isinstance(v, list) else str(v)) for k, v in TINY.items()}
    training["losses"] = ["ppo"]
    kernel = {"source": "import", "impl": "pkg.kernels", "contracts": ["C-PRC-01"], "device": "cpu"}
    assert client.post(f"/p/{project.slug}/training/", training).status_code == 302
    assert client.post(f"/p/{project.slug}/kernels/submit/", kernel).status_code == 302
    assert client.post(f"/p/{project.slug}/training/", training).status_code == 302
    refused = client.post(f"/p/{project.slug}/kernels/submit/", kernel)  # the fourth piece of work in a minute
    assert refused.status_code == 429 and b"throttled" in refused.content.lower()
    assert b'value="pkg.kernels"' in refused.content  # the form keeps what was typed
    again = client.post(f"/p/{project.slug}/training/", training)
    assert again.status_code == 429 and b"Request was throttled" in again.content
    tokenizer = client.post(
        f"/p/{project.slug}/fidelity/tokenizers/", {"file": as_file(TOY_VOCAB_TEXT.encode(), "v.json")}, follow=True
    )
    assert b"Request was throttled" in tokenizer.content
    assert TrainingAudit.objects.count() == 2 and Submission.objects.count() == 1
    assert not RegisteredTokenizer.objects.exists()


@pytest.fixture
def login_limit(settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    cache.clear()
    yield
    cache.clear()


def _sign_in(client, username, password):
    return client.post("/login/", {"username": username, "password": password})


def test_failed_sign_ins_lock_the_username_for_the_window(client, owner, login_limit):
    for _ in range(3):
        response = _sign_in(client, "olivia", "wrong-password")
        assert response.status_code == 200 and b"didn't match" in response.content
    locked = _sign_in(client, "OLIVIA", "pw-olivia-123")  # the right password, any case: still refused
    assert locked.status_code == 200 and b"Too many failed sign-ins" in locked.content
    assert "_auth_user_id" not in client.session
    other = get_user_model().objects.create_user("pat", password="pw-pat-12345")
    assert _sign_in(client, other.username, "pw-pat-12345").status_code == 302  # other accounts unaffected
    client.logout()
    cache.clear()  # the window has passed
    assert _sign_in(client, "olivia", "pw-olivia-123").status_code == 302


def test_unknown_usernames_are_counted_like_real_ones(client, login_limit):
    answers = [_sign_in(client, "nobody", "x").content for _ in range(4)]
    assert b"Too many failed sign-ins" in answers[-1]  # the same as for a real account: existence is not revealed
