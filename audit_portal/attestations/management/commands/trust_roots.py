"""``manage.py trust_roots [--keys-out FILE]``: the fingerprints a CI consumer pins — the signing keys the log
introduced (key id = SHA-256 of the public key, status, where the log introduced it, the C2SP note verifier key)
and the witness keys the log accepts cosignatures from — with the verifier options that pin them."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from audit_portal.attestations import keys


class Command(BaseCommand):
    help = "Print the signing-key and witness-key fingerprints to pin (derived from the log, not the key table)."

    def add_arguments(self, parser):
        parser.add_argument("--keys-out", metavar="FILE", help="also write the key set (for --pin-keys / --keys)")

    def handle(self, *args, keys_out=None, **options):
        history = keys.key_history(events_only=False)
        data = keys.with_note_keys(history.key_set())
        self.stdout.write(
            f"transparency log {keys.log_name()!r}: {len(data['keys'])} signing key(s), introduced through the log"
        )
        for entry in data["keys"]:
            self.stdout.write(
                f"  key {entry['key_id']}  {entry['status']:<7} introduced at log index "
                f"{entry['introduced_at_index']}\n      note key {entry.get('note_key', '?')}"
            )
        for problem in history.problems:
            self.stdout.write(f"  PROBLEM {problem}")
        witnesses = list(settings.AUDIT_LOG_WITNESS_KEYS)
        self.stdout.write(f"witnesses accepted by the log: {len(witnesses)}")
        for w in witnesses:
            self.stdout.write(f"  witness {w}")
        if keys_out:
            Path(keys_out).write_text(json.dumps(data, indent=2) + "\n")
            self.stdout.write(f"key set written to {keys_out}")
        pins = " ".join(f"--witness {w}" for w in witnesses)
        self.stdout.write(
            "pin with: python -m workers.verify --pin-keys KEYS.json (once), then python -m "
            f"workers.verify CERT.json {pins}{' --min-witnesses K' if witnesses else ''}"
        )
        if history.problems:
            raise SystemExit(1)
