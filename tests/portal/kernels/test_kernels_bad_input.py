"""Bad submissions are refused with a stable code and a reason naming what is wrong; nothing is queued and
nothing is stored for them."""

from __future__ import annotations

import io
from pathlib import Path

from functools import lru_cache

import pytest

from audit_portal.jobs.models import Job
from audit_portal.kernels import services
from audit_portal.kernels.models import Implementation, Submission
from audit_portal.kernels.submission_input import KERNEL_MODULE_MAX_BYTES
from workers.contracts.loader import SPECS_DIR

pytestmark = pytest.mark.django_db


@lru_cache(maxsize=1)
def shipped_contracts():
    """Parsed once per test module (parsing the twelve files is the slow part; load_contracts has its own tests)."""
    return services.parse_contract_files(SPECS_DIR.glob("*.yaml"))


@pytest.fixture(autouse=True)
def suite(db):
    services.store_contracts(shipped_contracts())


def url(project):
    return f"/api/v1/projects/{project.slug}/kernel-submissions/"


def upload(data: bytes, name="kernel.py"):
    f = io.BytesIO(data)
    f.name = name
    return f


def error(response):
    return response.json()["error"]


def assert_nothing_stored(settings):
    assert not Submission.objects.exists() and not Implementation.objects.exists() and not Job.objects.exists()
    kernels = Path(settings.ARTIFACT_ROOT) / "kernels"
    assert not kernels.exists() or not any(kernels.rglob("*.py"))
    incoming = Path(settings.ARTIFACT_ROOT) / "incoming"
    assert not incoming.exists() or not any(incoming.iterdir())  # streamed temporaries are discarded


def test_unknown_contract_id_is_named_with_the_known_ones(api, project, settings):
    response = api.post(url(project), {"impl": "pkg.kernels", "contracts": ["C-PRC-01", "C-ZZZ-09"]}, format="json")
    assert response.status_code == 400
    err = error(response)
    assert err["code"] == "unknown_contract" and "C-ZZZ-09" in err["message"]
    assert err["detail"]["unknown"] == ["C-ZZZ-09"] and "C-PRC-01/aten.mm/f32.f32->f32" in err["detail"]["known"]
    assert_nothing_stored(settings)


def test_malformed_import_path(api, project, settings):
    # file paths too: code from outside the worker's installed packages must be uploaded, never pointed at
    for impl in [
        "pkg.kernels:",
        "pkg..kernels:mm",
        "/etc/passwd.py:f",
        "../k.py:matmul",
        "pkg.kernels:mat mul",
        "pkg-kernels:mm",
    ]:
        response = api.post(url(project), {"impl": impl}, format="json")
        assert response.status_code == 400, impl
        assert error(response)["code"] == "invalid_import_path" and repr(impl) in error(response)["message"]
    assert_nothing_stored(settings)


def test_non_python_file_is_refused(api, project, settings):
    response = api.post(
        url(project), {"module": upload(b"def matmul(a, b):\n    return a @ b\n", "kernel.txt")}, format="multipart"
    )
    assert response.status_code == 400
    assert error(response)["code"] == "not_a_python_file" and "kernel.txt" in error(response)["message"]
    assert_nothing_stored(settings)


def test_binary_file_is_refused(api, project, settings):
    response = api.post(
        url(project), {"module": upload(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 20, "kernel.py")}, format="multipart"
    )
    assert response.status_code == 400
    assert error(response)["code"] == "not_python_source" and "binary" in error(response)["message"]
    latin1 = api.post(
        url(project),
        {"module": upload("# caf\xe9\ndef mul(x, w):\n    return x\n".encode("latin-1"))},
        format="multipart",
    )
    assert latin1.status_code == 400 and error(latin1)["detail"]["line"] == 1 and "UTF-8" in error(latin1)["message"]
    assert_nothing_stored(settings)


def test_syntax_error_names_the_line(api, project, settings):
    source = b"import torch\n\n\ndef matmul(a, b)\n    return a @ b\n"
    response = api.post(url(project), {"module": upload(source)}, format="multipart")
    assert response.status_code == 400
    err = error(response)
    assert err["code"] == "python_syntax_error" and err["detail"]["line"] == 4 and "line 4" in err["message"]
    assert_nothing_stored(settings)


def test_oversized_module_is_refused_before_it_is_stored(api, project, settings):
    big = b"# padding\n" * (KERNEL_MODULE_MAX_BYTES // 10 + 10)
    response = api.post(url(project), {"module": upload(big)}, format="multipart")
    assert response.status_code == 413 and error(response)["code"] == "kernel_module_too_large"
    assert_nothing_stored(settings)


def test_named_function_missing_from_the_module(api, project, settings):
    source = b"import torch\n\ndef my_softmax(x):\n    return torch.softmax(x, -1)\n"
    response = api.post(
        url(project),
        {"module": upload(source), "contracts": "C-CMP-03,C-EXC-01", "functions": '{"C-CMP-03": "my_softmax"}'},
        format="multipart",
    )
    assert response.status_code == 400
    err = error(response)
    assert err["code"] == "function_not_found" and "C-EXC-01 needs 'row_max'" in err["message"]
    assert_nothing_stored(settings)


def test_unknown_platform_and_missing_implementation(api, project, settings):
    response = api.post(url(project), {"impl": "pkg.kernels", "device": "tpu"}, format="json")
    assert response.status_code == 400 and error(response)["code"] == "unknown_platform"
    response = api.post(url(project), {"contracts": ["C-PRC-01"]}, format="json")
    assert response.status_code == 400 and error(response)["code"] == "implementation_missing"
    response = api.post(url(project), {"impl": ["pkg.kernels"]}, format="json")
    assert response.status_code == 400 and error(response)["detail"] == {"field": "impl"}
    assert_nothing_stored(settings)


def test_a_valid_upload_is_stored_once_by_its_hash_and_the_function_names_are_checked_statically(
    api, project, settings
):
    source = b"import torch\n\ndef softmax(x):\n    return torch.softmax(x, -1)\n\nrow_max = lambda x: x.amax(-1)\n"
    first = api.post(url(project), {"module": upload(source), "device": "cuda"}, format="multipart")
    again = api.post(url(project), {"module": upload(source, "renamed.py"), "device": "cuda"}, format="multipart")
    assert first.status_code == again.status_code == 201
    # no contract list: only the contracts whose signature function the module defines
    assert sorted(e["class"] for e in first.json()["plan"]) == ["C-CMP-03", "C-EXC-01"]
    assert first.json()["job"]["queue"] == "kernels-gpu"  # cuda submissions go to the GPU kernels workers
    assert first.json()["implementation"]["id"] == again.json()["implementation"]["id"]
    stored = list((Path(settings.ARTIFACT_ROOT) / "kernels").rglob("*.py"))
    assert len(stored) == 1 and stored[0].read_bytes() == source
    assert first.json()["implementation"]["code_sha256"] == stored[0].stem


def test_the_browser_form_shows_the_syntax_error_line(client, owner, project, settings):
    client.force_login(owner)
    response = client.post(
        f"/p/{project.slug}/kernels/submit/",
        {
            "source": "upload",
            "impl": "ignored.when:uploading",
            "module": upload(b"def softmax(x):\n    return (x\n", "soft.py"),
        },
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="submit-error"' in html and "python_syntax_error" in html and "soft.py" in html and "line 2" in html
    assert_nothing_stored(settings)
