"""Reads for jobs, scoped by the caller's readable projects."""

from __future__ import annotations

from audit_portal.accounts.principal import Principal
from audit_portal.accounts.scoping import get_scoped_or_404
from audit_portal.jobs.models import Job


def jobs_for(principal: Principal, project=None):
    qs = Job.objects.filter(project__in=principal.readable_projects()).select_related("project")
    if project is not None:
        qs = qs.filter(project=project)
    return qs


def get_job(principal: Principal, job_id: int) -> Job:
    return get_scoped_or_404(jobs_for(principal), pk=job_id)


def jobs_for_subject(principal: Principal, subject_kind: str, subject_id: int):
    return jobs_for(principal).filter(subject_kind=subject_kind, subject_id=subject_id)
