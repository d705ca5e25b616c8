"""The web tier only parses a submitted kernel: its top-level code never runs there, and the kernels app's
pages and API (contract loading, spec rendering, grading helpers) never import torch."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from audit_portal.kernels import services
from workers.contracts.loader import SPECS_DIR


@pytest.mark.django_db
def test_an_uploaded_module_is_parsed_never_imported(api, project, tmp_path):
    services.store_contracts(services.parse_contract_files([SPECS_DIR / "C-CMP-03.softmax.v0.1.0.yaml"]))
    marker = tmp_path / "imported"
    source = (
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('the web process ran me')\n\n"
        "def softmax(x):\n    return x.softmax(-1)\n"
    ).encode()
    module = io.BytesIO(source)
    module.name = "side_effect.py"
    response = api.post(f"/api/v1/projects/{project.slug}/kernel-submissions/", {"module": module}, format="multipart")
    assert response.status_code == 201, response.content
    assert [e["function"] for e in response.json()["plan"]] == ["softmax"]
    assert not marker.exists()


def test_kernels_web_code_never_imports_torch():
    code = (
        "import django, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE','audit_portal.settings'); django.setup()\n"
        "from audit_portal.kernels import api, views, selectors, services, submission_input, urls, api_urls\n"
        "from audit_portal.kernels.models import Contract\n"
        "from workers.contracts.loader import SPECS_DIR\n"
        "from workers.contracts.grading import grade, interop\n"
        "parsed = services.parse_contract_files(SPECS_DIR.glob('*.yaml'))\n"
        "row = Contract(source_text=parsed[0].source_text, source_name='x.yaml', spec={})\n"
        "assert list(selectors.spec_in_source_order(row))[:2] == ['id', 'class']\n"
        "submission_input.check_kernel_module(b'import torch\\ndef matmul(a, b):\\n    return a @ b\\n', 'k.py')\n"
        "grade([{'contract_id': 'C-PRC-01/x', 'verdict': 'PASS', 'assurance_level': 3}]); interop({'a': []})\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
