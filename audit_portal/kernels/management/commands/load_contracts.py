"""Load the kernel contract suite (workers/contracts/specs/*.yaml) and the declared-property contracts
(workers/contracts/specs/declared/*.yaml) into the database, versioned.

    python manage.py load_contracts [--dir DIR] [--declared-dir DIR] [--no-calibrate] [--recalibrate]

Idempotent: files already loaded with the same text are left alone. Refuses (exit 1, nothing written) a
file that does not validate (naming the field and line) or a loaded id+version whose text has changed.
New versions get a calibration job queued unless --no-calibrate. ``--dir`` alone loads that directory only (no
declared contracts unless ``--declared-dir`` names theirs).
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from audit_portal.core.errors import QueueUnavailable
from audit_portal.kernels import selectors, services


class Command(BaseCommand):
    help = "Load the kernel contract files into the database (new versions become new rows; edits are refused)."

    def add_arguments(self, parser):
        parser.add_argument("--dir", help="directory of contract YAML files (default: the engine's shipped specs)")
        parser.add_argument(
            "--declared-dir",
            help="directory of declared-property contract files (default: the engine's, unless --dir is given)",
        )
        parser.add_argument("--no-calibrate", action="store_true", help="do not queue calibration of new versions")
        parser.add_argument(
            "--recalibrate",
            action="store_true",
            help="also queue calibration of loaded versions that are not calibrated (failed, never run)",
        )

    def handle(self, *args, **options):
        from workers.contracts.loader import DECLARED_DIR, SPECS_DIR  # torch-free

        directory = Path(options["dir"] or SPECS_DIR)
        declared_dir = options["declared_dir"] or (None if options["dir"] else DECLARED_DIR)
        paths = sorted(directory.glob("*.yaml"))
        if not paths:
            raise CommandError(f"no contract files (*.yaml) in {directory}")
        declared_paths = sorted(Path(declared_dir).glob("*.yaml")) if declared_dir else []
        if declared_dir and not declared_paths:
            raise CommandError(f"no contract files (*.yaml) in {declared_dir}")
        try:
            with transaction.atomic():  # both sets or neither
                report = services.load_contract_files(paths)
                more = services.load_contract_files(declared_paths, declared=True)
        except services.ContractLoadError as exc:
            raise CommandError(str(exc)) from None
        report.created += more.created
        report.unchanged += more.unchanged
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
