"""The submission API's job carries the job's outcome and when it last changed, exactly as its websocket events do.

The submission page renders whichever of a websocket event and a fetch of this API is newer (static/js/kernels.js).
Without these two fields a fetch answered after the last event drew the bare state: a green "succeeded" badge over a
submission whose contracts failed (seen in CI as a flaky browser test)."""

from __future__ import annotations

import pytest

from audit_portal.jobs import services as jobs
from audit_portal.jobs.models import Job
from audit_portal.kernels import services
from workers.contracts.grading import grade

from .test_kernels_results import make_submission, suite  # noqa: F401  (autouse: the contract suite)

pytestmark = pytest.mark.django_db


def test_the_submission_api_job_says_what_the_kernel_got_like_its_events(api, project):
    submission = make_submission(project, "vendor.kernels", {"C-EXC-01": "PASS", "C-PRC-03": "FAIL"}, finish=False)
    services.finish_submission(submission, grade([v.detail for v in submission.verdicts.all()]))
    jobs.finish_job(submission.job, {"submission": submission.pk, "verdict_counts": {"PASS": 1, "FAIL": 1}})
    body = api.get(f"/api/v1/kernel-submissions/{submission.pk}/").json()
    job = Job.objects.get(pk=submission.job_id)
    event = job.as_event()
    assert body["job"]["state"] == "succeeded"
    assert body["job"]["outcome"] == event["outcome"]
    assert body["job"]["outcome"]["text"] == "finished: 1 of 2 contracts failed"
    assert body["job"]["outcome"]["tone"] == "invalid"
    assert body["job"]["updated_at"] == event["updated_at"]
