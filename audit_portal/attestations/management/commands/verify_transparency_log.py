import json

from django.core.management.base import BaseCommand, CommandError

from audit_portal.attestations.selectors import verify_log


class Command(BaseCommand):
    help = "Check every entry and checkpoint of the transparency log (exit 1 naming the problems if any)."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        result = verify_log()
        if options["json"]:
            self.stdout.write(json.dumps(result.as_dict(), indent=2))
        else:
            self.stdout.write(
                f"tree size {result.tree_size}, root {result.root_hash}, {result.entries_checked} "
                f"entries, {result.checkpoints_checked} checkpoints and {result.witnessed_checked} "
                f"witnessed checkpoints checked"
            )
            for text in result.warnings:
                self.stdout.write(f"warning: {text}")
        if not result.ok:
            raise CommandError("transparency log verification failed:\n  " + "\n  ".join(result.problems))
