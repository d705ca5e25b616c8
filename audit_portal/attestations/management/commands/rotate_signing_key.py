from django.core.management.base import BaseCommand, CommandError

from audit_portal.attestations.keys import SigningKeyError
from audit_portal.attestations.services import retire_signing_key, rotate_signing_key


class Command(BaseCommand):
    help = (
        "Replace the certificate signing key with a new Ed25519 key, by a log entry the old key signs. The old key "
        "is retired: its public part stays in the key set derived from the log, so what it signed still verifies."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--to",
            metavar="NEW.pem",
            default=None,
            help="rotate to this Ed25519 PEM key (needed when the key comes from AUDIT_SIGNING_KEY*)",
        )
        parser.add_argument(
            "--retire",
            action="store_true",
            help="retire the active key without a successor: the log is closed to new signatures",
        )

    def handle(self, *args, to=None, retire=False, **options):
        try:
            if retire:
                self.stdout.write(f"retired {retire_signing_key()} (no key is active now)")
                return
            old, new = rotate_signing_key(to)
        except SigningKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"retired {old or '(none)'}\nactive  {new}")
