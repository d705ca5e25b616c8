"""Tokenizer files are parsed in a process of their own under memory and CPU limits, never in the web process
(workers/fidelity/tokenizer_check.py): registration works while the web process cannot parse one at all, and a file
past the checker's limits is a 400 ``tokenizer_too_complex`` with nothing stored."""

from __future__ import annotations

import pytest

from audit_portal.fidelity.models import RegisteredTokenizer

from ..conftest import as_file

pytestmark = pytest.mark.django_db


def _big_tokenizer() -> bytes:
    from workers.fidelity.tokenizer import toy_tokenizer_json

    return toy_tokenizer_json({str(i): f"tok{i:07d}" for i in range(400_000)}).encode()  # 7 MiB, ~3 s to check


def test_registration_never_parses_in_the_web_process(api, project, monkeypatch):
    import tokenizers

    from workers.fidelity.tokenizer import FidelityTokenizer, toy_tokenizer_json

    hf = toy_tokenizer_json({"0": "a", "1": "b", "2": "<|end|>"}).encode()

    def refuse(*_a, **_k):
        raise AssertionError("a tokenizer was parsed in the web process")

    monkeypatch.setattr(tokenizers.Tokenizer, "from_str", refuse)
    monkeypatch.setattr(FidelityTokenizer, "from_json", refuse)
    url = f"/api/v1/projects/{project.slug}/tokenizers/"
    created = api.post(url, {"file": as_file(hf, "tokenizer.json")}, format="multipart")
    monkeypatch.undo()
    assert created.status_code == 201, created.content
    assert created.json()["kind"] == "hf" and created.json()["vocab_size"] == 4  # 3 and the toy's [UNK]


@pytest.mark.parametrize(
    "limit", [{"TOKENIZER_CHECK_SECONDS": "1"}, {"TOKENIZER_CHECK_MEMORY_BYTES": "400000000"}], ids=["cpu", "memory"]
)
def test_a_tokenizer_past_the_checkers_limits_is_refused_and_not_stored(api, project, monkeypatch, limit):
    for k, v in limit.items():
        monkeypatch.setenv(k, v)
    url = f"/api/v1/projects/{project.slug}/tokenizers/"
    response = api.post(url, {"file": as_file(_big_tokenizer(), "tokenizer.json")}, format="multipart")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "tokenizer_too_complex" and "limits" in error["message"]
    assert not RegisteredTokenizer.objects.exists()
