"""``python -m workers.contracts ...`` (see cli.py)."""

import sys

from .cli import main

if __name__ == "__main__":  # guard: the sandbox's forkserver may import the main module
    sys.exit(main())
