"""Rate limits on the API's writes that cost a worker: uploads (tests/portal/test_upload_api.py) and kernel
submissions share one budget per API key or user (UPLOAD_THROTTLE_RATE); reads are not limited."""
from __future__ import annotations

import pytest
from django.core.cache import cache

from audit_portal.kernels import services
from audit_portal.kernels.models import Submission
from workers.contracts.loader import SPECS_DIR

from .conftest import as_file, jsonl, records, upload_url

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
