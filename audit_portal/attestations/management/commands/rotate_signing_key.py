from django.core.management.base import BaseCommand, CommandError

from audit_portal.attestations.keys import SigningKeyError
from audit_portal.attestations.services import rotate_signing_key


class Command(BaseCommand):
    help = ("Replace the certificate signing key with a new Ed25519 key. The old key is retired: its public part "
            "stays in the published key set, so certificates it signed still verify.")

    def handle(self, *args, **options):
        try:
            old, new = rotate_signing_key()
        except SigningKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"retired {old or '(none)'}\nactive  {new}")
