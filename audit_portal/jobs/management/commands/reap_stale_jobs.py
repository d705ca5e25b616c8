from django.core.management.base import BaseCommand

from audit_portal.jobs.services import reap_stale_jobs


class Command(BaseCommand):
    help = "Retry or fail running jobs whose worker stopped reporting; resend queued jobs never picked up."

    def handle(self, *args, **options):
        self.stdout.write(str(reap_stale_jobs()))
