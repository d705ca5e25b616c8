"""Load the kernel contract suite (workers/contracts/specs/*.yaml) into the database, versioned.

    python manage.py load_contracts [--dir DIR] [--no-calibrate] [--recalibrate]

Idempotent: files already loaded with the same text are left alone. Refuses (exit 1, nothing written) a
file that does not validate (naming the field and line) or a loaded id+version whose text has changed.
New versions get a calibration job queued unless --no-calibrate.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from audit_portal.core.errors import QueueUnavailable
from audit_portal.kernels import selectors, services


class Command(BaseCommand):
    help = "Load the kernel contract files into the database (new versions become new rows; edits are refused)."

    def add_arguments(self, parser):
        parser.add_argument("--dir", help="directory of contract YAML files (default: the engine's shipped specs)")
        parser.add_argument("--no-calibrate", action="store_true", help="do not queue calibration of new versions")
        parser.add_argument(
            "--recalibrate",
            action="store_true",
            help="also queue calibration of loaded versions that are not calibrated (failed, never run)",
        )

    def handle(self, *args, **options):
        from workers.contracts.loader import SPECS_DIR  # torch-free

        directory = Path(options["dir"] or SPECS_DIR)
        paths = sorted(directory.glob("*.yaml"))
        if not paths:
            raise CommandError(f"no contract files (*.yaml) in {directory}")
        try:
            report = services.load_contract_files(paths)
        except services.ContractLoadError as exc:
            raise CommandError(str(exc)) from None
        for contract in report.created:
            self.stdout.write(f"loaded   {contract.contract_id} v{contract.version}")
        self.stdout.write(f"{len(report.created)} contract version(s) loaded, {len(report.unchanged)} unchanged")
        to_calibrate = [] if options["no_calibrate"] else list(report.created)
        if options["recalibrate"]:
            to_calibrate += [c for c in report.unchanged if selectors.calibration_state(c)["status"] != "calibrated"]
        if to_calibrate:
            try:
                job = services.queue_calibration(to_calibrate, submitted_by="load_contracts")
            except QueueUnavailable:
                # the versions are loaded; their calibration shows "queued" and the stale-job reaper resends it
                self.stderr.write("warning: broker unreachable; calibration job recorded, to be resent by the reaper")
            else:
                self.stdout.write(f"calibration queued as job {job.pk}")
