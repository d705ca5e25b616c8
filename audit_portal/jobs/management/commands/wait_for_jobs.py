"""Wait until a project's jobs (including follow-ups they queue) have all finished."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from audit_portal.jobs.models import TERMINAL_STATES, Job


class Command(BaseCommand):
    help = (
        "Block until every job of a project is succeeded, failed or cancelled; exit non-zero when one failed or "
        "the timeout passed (naming the jobs and their states)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--timeout", type=float, default=300)

    def handle(self, *args, project, timeout, **options):
        deadline = time.monotonic() + timeout
        last = None
        while True:
            jobs = list(Job.objects.filter(project__slug=project).order_by("pk"))
            pending = [j for j in jobs if j.state not in TERMINAL_STATES]
            line = ", ".join(f"#{j.pk} {j.kind} {j.state} {j.progress:.0%}" for j in pending) or "all done"
            if line != last:
                self.stdout.write(f"  jobs: {line}")
                last = line
            if not pending:
                failed = [j for j in jobs if j.state == "failed"]
                for j in failed:
                    self.stderr.write(f"  job #{j.pk} {j.kind} failed: {j.error}")
                if failed:
                    raise CommandError(f"{len(failed)} of {len(jobs)} job(s) failed")
                return
            if time.monotonic() > deadline:
                raise CommandError(f"timed out after {timeout:.0f} s with {len(pending)} job(s) pending: {line}")
            time.sleep(1)
