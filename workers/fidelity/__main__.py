import sys

from workers.fidelity.cli import main

sys.exit(main())
