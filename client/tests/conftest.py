"""The client's own tests run without installing it (``python -m pytest client/tests``) and without a portal; the
end-to-end tests against a running portal are in the repository's tests/portal/client/test_client_e2e.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
