"""``manage.py check_consistency``: every upload has its file and digest, every finished job its results, no job
stuck running, the transparency log verifies. Exits 1 with the list of problems; read-only."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from audit_portal.jobs.consistency import check


class Command(BaseCommand):
    help = "Check that nothing was lost: upload files and digests, job results, stuck jobs, the transparency log."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-rehash", action="store_true", help="compare file sizes only (re-hashing reads every stored byte)"
        )
        parser.add_argument(
            "--grace",
            type=float,
            default=300.0,
            help="seconds a file may sit in the store before a row must account for it (default 300)",
        )
        parser.add_argument("--project", help="check one project (slug); stray files are then not looked for")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the report as JSON")

    def handle(self, *args, no_rehash, grace, project, as_json, **options):
        target = None
        if project:
            from audit_portal.accounts.models import Project

            target = Project.objects.filter(slug=project).first()
            if target is None:
                raise CommandError(f"no project {project!r}")
        report = check(rehash=not no_rehash, grace_seconds=grace, project=target)
        if as_json:
            self.stdout.write(_dumps(report.as_dict()))
        else:
            for message in report.problems:
                self.stdout.write(f"PROBLEM  {message}")
            for message in report.warnings:
                self.stdout.write(f"warning  {message}")
            checked = ", ".join(f"{k}={v}" for k, v in sorted(report.counts.items())) or "nothing to check"
            self.stdout.write(f"checked: {checked}")
        if not report.ok:
            raise CommandError(f"{len(report.problems)} consistency problem(s)")
        if not as_json:
            self.stdout.write("consistent")


def _dumps(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True)
