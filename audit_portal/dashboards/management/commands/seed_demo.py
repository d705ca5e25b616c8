"""Create the demo user and project and upload a generated, realistic run log through the real service
path (so the demo exercises validation and every follow-up job exactly as a user upload would)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from audit_portal.accounts.models import Project
from audit_portal.accounts.services import create_project
from audit_portal.runs.services import receive_upload
from audit_portal.runs.upload_handler import hashed_file_from_path, incoming_dir


class Command(BaseCommand):
    help = "Create the demo user/project and submit a generated run log."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="demo")
        parser.add_argument("--password", default="demo-password")
        parser.add_argument("--trajectories", type=int, default=96)

    def handle(self, *args, username, password, trajectories, **options):
        from workers.fcr.synth import SynthConfig, write_run  # numpy only, no torch

        User = get_user_model()
        user, created = User.objects.get_or_create(username=username, defaults={"is_staff": True, "is_superuser": True})
        if created:
            user.set_password(password)
            user.save()
        project = Project.objects.filter(slug="demo").first() or create_project(
            name="Demo",
            slug="demo",
            owner=user,
            description="A generated RL run with a bf16-like rollout/trainer mismatch and rare routing flips.",
        )
        path = incoming_dir() / "demo-run.jsonl.gz"
        stats = write_run(path, SynthConfig(trajectories=trajectories, run_id="demo-run", seed=7))
        upload, created = receive_upload(project=project, uploaded=hashed_file_from_path(path), submitted_by=username)
        self.stdout.write(
            f"demo project '{project.slug}', user '{username}'"
            + (f" / password '{password}'" if created else "")
            + f"; run log {stats['records']} calls, {stats['tokens']} tokens → upload #{upload.pk} ({upload.stage})"
        )
