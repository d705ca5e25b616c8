"""Entry point: ``python -m workers.certify RUN.jsonl [--json] …`` (see :mod:`workers.certify.cli`)."""

import sys

from workers.certify.cli import main

sys.exit(main())
