"""REST endpoints of the fidelity audit: report, calls (filters, cursor pagination, bad parameters), a call's spans
and tokens, the mask export, tokenizer upload/list; another project's data is 404; the pages render."""

from __future__ import annotations

import hashlib

import pytest
from rest_framework.test import APIClient

from audit_portal import task_names
from audit_portal.accounts.models import Role
from audit_portal.accounts.services import issue_api_key
from audit_portal.fidelity.models import FidelityCall, RegisteredTokenizer
from workers.fidelity import read_masks

from ..conftest import as_file
from ..pipelines.test_fidelity_job import TOY_TOKENIZER_SHA, TOY_VOCAB_TEXT, audited, examples, register_toy

pytestmark = pytest.mark.django_db


@pytest.fixture
def report(api, project):
    return audited(api, project, examples())[0]


def test_report_endpoints(api, report):
    body = api.get(f"/api/v1/fidelity/reports/{report.pk}/").json()
    assert body["verdict"] == "FAIL" and body["closed_failure_violations"] == 1
    assert body["coverage"]["background_ledger"]["background:title"] == {"calls": 1, "tokens": 2}
    assert body["tokenizers"]["unmatched"] == [TOY_TOKENIZER_SHA]
    assert set(body["mask_downloads"]) == {"jsonl", "bin"}
    assert api.get(f"/api/v1/runs/{report.run_id}/fidelity/").json()["id"] == report.pk
    assert api.get(f"/api/v1/uploads/{report.upload_id}/fidelity/").json()["id"] == report.pk


def test_calls_filters_and_pagination(api, report):
    url = f"/api/v1/fidelity/reports/{report.pk}/calls/"

    def ids(query):
        response = api.get(url + query)
        assert response.status_code == 200, response.content
        return [c["call_id"] for c in response.json()["results"]]

    assert ids("") == ["tA-0", "tA-bg-1", "tD-0"]  # file order
    assert ids("?verdict=partial") == ["tD-0"]
    assert ids("?verdict=excluded") == ["tA-bg-1"]
    assert ids("?reason=SENTINEL_LOGPROB") == ["tD-0"]
    assert ids("?primary_reason=BACKGROUND_CALL") == ["tA-bg-1"]
    assert ids("?reason=TRAINER_MISALIGNED") == []
    assert ids("?role=policy&verdict=verifiable") == ["tA-0"]
    first = api.get(url + "?page_size=2").json()
    assert [c["call_id"] for c in first["results"]] == ["tA-0", "tA-bg-1"] and first["next"]
    assert [c["call_id"] for c in api.get(first["next"]).json()["results"]] == ["tD-0"]
    d = api.get(url + "?verdict=partial").json()["results"][0]
    assert d["spans"][1] == {"start": 2, "end": 3, "verifiable": False, "reasons": ["SENTINEL_LOGPROB"]}
    for bad in ("?verdict=ok", "?reason=NOT_A_CODE", "?primary_reason=x", "?step=abc", "?role=admin"):
        response = api.get(url + bad)
        assert response.status_code == 400, bad
        assert response.json()["error"]["code"] == "invalid_parameter", bad


def test_call_detail_with_spans_and_tokens(api, project, report):
    d = FidelityCall.objects.get(report=report, call_id="tD-0")
    body = api.get(f"/api/v1/fidelity/calls/{d.pk}/").json()
    assert body["verdict"] == "partial" and body["rules"]["R6"] == "fail" and "tokens" not in body
    with_tokens = api.get(f"/api/v1/fidelity/calls/{d.pk}/?tokens=true").json()["tokens"]
    assert [t["id"] for t in with_tokens["tokens"]] == [20, 24, 22, 3]  # read back from the uploaded file
    assert [t["verifiable"] for t in with_tokens["tokens"]] == [True, True, False, True]
    assert with_tokens["tokens"][2]["rollout_logprob"] == -9999.0 and with_tokens["tokens"][2]["loss_mask_used"]
    assert with_tokens["tokenizer"] is None and with_tokens["tokens"][0]["text"] is None  # ids only
    register_toy(api, project)
    decoded = api.get(f"/api/v1/fidelity/calls/{d.pk}/?tokens=true").json()["tokens"]
    assert "".join(t["text"] for t in decoded["tokens"]) == "ls -l\n<|end|>"  # docs/fcr.md#toy-tokenizer vocabulary
    assert api.get(f"/api/v1/fidelity/calls/{d.pk}/?tokens=maybe").status_code == 400


def test_mask_download(api, report, tmp_path):
    url = f"/api/v1/fidelity/reports/{report.pk}/masks/"
    jsonl = api.get(url + "?format=jsonl")
    assert jsonl.status_code == 200 and jsonl["Content-Disposition"].startswith("attachment")
    assert b'"call_id":"tD-0"' in b"".join(jsonl.streaming_content)
    binary = api.get(url + "?format=bin")
    path = tmp_path / "m.bin"
    path.write_bytes(b"".join(binary.streaming_content))
    assert path.read_bytes().startswith(b"FCRMASK1")
    assert {c: m.astype(int).tolist() for c, m in read_masks(path)}["tD-0"] == [
        1,
        1,
        0,
        1,
    ]  # Example D (docs/fcr.md): position 2 off
    bad = api.get(url + "?format=parquet")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_parameter"


def test_another_projects_report_is_404(api, project, other_project, owner):
    from audit_portal.fidelity import services
    from audit_portal.runs.models import Upload

    foreign = Upload.objects.create(project=other_project, original_name="x", sha256="e" * 64, size_bytes=1)
    report = services.complete(
        services.begin(foreign, {}), {"verdict": "PASS", "coverage": {}}, tokenizers={}, masks={}
    )
    services.add_calls(report, [{"line": 1, "call_id": "secret", "verdict": "verifiable", "spans": []}])
    call = FidelityCall.objects.get(report=report)
    for url in [
        f"/api/v1/fidelity/reports/{report.pk}/",
        f"/api/v1/fidelity/reports/{report.pk}/calls/",
        f"/api/v1/fidelity/reports/{report.pk}/masks/?format=jsonl",
        f"/api/v1/fidelity/calls/{call.pk}/",
        f"/api/v1/projects/{other_project.slug}/tokenizers/",
        f"/api/v1/uploads/{foreign.pk}/fidelity/",
    ]:
        assert api.get(url).status_code == 404, url
    # pages too, for a signed-in member of the first project only
    client = APIClient()
    client.force_login(owner)
    assert client.get(f"/p/{project.slug}/fidelity/calls/{call.pk}/").status_code == 404
    assert client.get(f"/p/{other_project.slug}/fidelity/calls/{call.pk}/").status_code == 404
    from audit_portal.runs.models import Run

    foreign_run = Run.objects.create(project=other_project, name="theirs")
    assert client.get(f"/p/{project.slug}/runs/{foreign_run.pk}/fidelity/").status_code == 404
    mine = Run.objects.create(project=project, name="not-yet-audited")
    assert "No fidelity report yet" in client.get(f"/p/{project.slug}/runs/{mine.pk}/fidelity/").content.decode()


def test_tokenizer_upload_and_list(api, project):
    url = f"/api/v1/projects/{project.slug}/tokenizers/"
    bad = api.post(url, {"file": as_file(b'{"model": {"type": "BPE",', "tokenizer.json")}, format="multipart")
    assert bad.status_code == 400
    err = bad.json()["error"]
    assert err["code"] == "invalid_tokenizer_json" and "not valid JSON" in err["message"] and "line 1" in err["message"]
    wrong = api.post(url, {"file": as_file(b'{"hello": "world"}', "tokenizer.json")}, format="multipart")
    assert wrong.status_code == 400 and "Hugging Face tokenizer.json" in wrong.json()["error"]["message"]
    broken = api.post(
        url, {"file": as_file(b'{"model": {"type": "NoSuchModel"}}', "tokenizer.json")}, format="multipart"
    )
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_tokenizer"
    assert api.post(url, {}, format="multipart").json()["error"]["code"] == "file_missing"

    from workers.fidelity.tokenizer import toy_tokenizer_json  # a real HF tokenizer.json, built by `tokenizers`

    import json

    hf_bytes = toy_tokenizer_json(json.loads(TOY_VOCAB_TEXT)).encode()
    created = api.post(url, {"file": as_file(hf_bytes, "tokenizer.json"), "name": "toy-hf"}, format="multipart")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (
        body["kind"] == "hf" and body["sha256"] == hashlib.sha256(hf_bytes).hexdigest()
    )  # docs/fcr.md#conventions: the file bytes
    again = api.post(url, {"file": as_file(hf_bytes, "copy.json")}, format="multipart")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    toy = register_toy(api, project)
    assert {t["sha256"] for t in api.get(url).json()["results"]} == {body["sha256"], toy["sha256"]}
    stored = RegisteredTokenizer.objects.get(pk=body["id"])
    from django.conf import settings

    assert (settings.ARTIFACT_ROOT / stored.storage_name).read_bytes() == hf_bytes
    assert stored.storage_name.startswith("fidelity/tokenizers/") and body["sha256"] in stored.storage_name


def test_read_only_key_cannot_register_a_tokenizer(project, owner):
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION="Bearer "
        + issue_api_key(project=project, name="ro", scopes=["read"], created_by=owner).token
    )
    response = client.post(
        f"/api/v1/projects/{project.slug}/tokenizers/",
        {"file": as_file(TOY_VOCAB_TEXT.encode(), "v.json")},
        format="multipart",
    )
    assert response.status_code == 403
    assert client.get(f"/api/v1/projects/{project.slug}/tokenizers/").status_code == 200


def test_pages_render_for_a_member(client, api, project, member_of, report):
    client.force_login(member_of(project, Role.MEMBER))
    run_page = client.get(f"/p/{project.slug}/runs/{report.run_id}/").content.decode()
    assert f"/p/{project.slug}/runs/{report.run_id}/fidelity/" in run_page
    page = client.get(f"/p/{project.slug}/runs/{report.run_id}/fidelity/")
    html = page.content.decode()
    assert page.status_code == 200 and 'id="verdict-value">FAIL<' in html and 'id="cf-count">1<' in html
    assert "none matched" in html and TOY_TOKENIZER_SHA[:12] in html
    assert "/static/vendor/plotly-basic.min" in html and 'id="fid-figures"' in html
    filtered = client.get(f"/p/{project.slug}/runs/{report.run_id}/fidelity/?verdict=excluded").content.decode()
    table = filtered[filtered.index('id="calls-table"') :]
    assert "tA-bg-1</a>" in table and "tD-0</a>" not in table and "tA-0</a>" not in table
    bad = client.get(f"/p/{project.slug}/runs/{report.run_id}/fidelity/?reason=BOGUS")
    assert bad.status_code == 200 and "reason must be a reason code" in bad.content.decode()
    d = FidelityCall.objects.get(report=report, call_id="tD-0")
    call_html = client.get(f"/p/{project.slug}/fidelity/calls/{d.pk}/").content.decode()
    assert call_html.count("data-pos=") == 4 and 'data-reasons="SENTINEL_LOGPROB"' in call_html
    tokenizers = client.get(f"/p/{project.slug}/fidelity/tokenizers/")
    assert tokenizers.status_code == 200 and 'id="tokenizer-form"' in tokenizers.content.decode()


def test_tokenizer_form_upload(client, project, owner):
    client.force_login(owner)
    url = f"/p/{project.slug}/fidelity/tokenizers/"
    response = client.post(url, {"file": as_file(b"not json at all", "tokenizer.json")}, follow=True)
    assert "not valid JSON" in response.content.decode()
    response = client.post(url, {"file": as_file(TOY_VOCAB_TEXT.encode(), "vocab.json"), "name": "toy"}, follow=True)
    assert "Registered toy" in response.content.decode() and TOY_TOKENIZER_SHA in response.content.decode()
    assert RegisteredTokenizer.objects.filter(project=project, sha256=TOY_TOKENIZER_SHA).count() == 1


def test_fidelity_page_follows_a_running_audit_live(client, project, member_of, report):
    """While a (re-)audit runs, the page shows its progress and follows /ws/jobs/<id>/ (polling /api/v1/jobs/<id>/
    when the socket is down) instead of needing a reload; finished jobs stay plain notices."""
    from audit_portal.jobs import services as job_services

    running = job_services.create_job(
        project=project,
        kind="fidelity_audit",
        task_name=task_names.FIDELITY_AUDIT,
        subject_kind="upload",
        subject_id=report.upload_id,
        enqueue=False,
    )
    job_services.start_job(running.pk)
    job_services.report_progress(running, 0.42, "auditing: 45% of the file read (line 9)")
    client.force_login(member_of(project, Role.MEMBER))
    html = client.get(f"/p/{project.slug}/runs/{report.run_id}/fidelity/").content.decode()
    card = html[html.index("data-live-job") :][:2000]
    assert f'data-socket="/ws/jobs/{running.pk}/"' in card and f'data-api="/api/v1/jobs/{running.pk}/"' in card
    assert 'data-state="running"' in card and "width: 42%" in card and "45% of the file read" in card
    assert "/static/js/fidelity.js" in html and "FidelityPage.followJobs()" in html
    job_services.fail_job(running, "boom")
    html = client.get(f"/p/{project.slug}/runs/{report.run_id}/fidelity/").content.decode()
    assert "data-live-job" not in html and f"#{running.pk}</a> is failed: boom" in html
