"""Signed certificates and the transparency log, through the real job paths: every run certificate, fidelity
report and kernel conformance result is signed (in-toto Statement v1 in a DSSE envelope, Ed25519) and appended to
the RFC 6962 log; the API and the pages report each check; the offline verifier accepts the downloaded bundle; and
tampering with the certificate row, a log row or the audited file fails the check it should, by name."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from audit_portal.attestations import selectors, services
from audit_portal.attestations.keys import key_set
from audit_portal.attestations.models import Checkpoint, LogEntry, SigningKey
from audit_portal.certificates.models import RunCertificate
from audit_portal.jobs.models import Job
from audit_portal.kernels import services as kernel_services
from audit_portal.kernels.submission_input import check_kernel_module
from audit_portal.runs.models import Upload
from audit_portal.runs.services import artifact_path
from pipelines import certify_upload
from workers.verify import merkle
from workers.verify import statement as st

from ..conftest import records
from ..certificates.test_certificates import certified
from ..pipelines.test_fidelity_job import audited, examples
from ..kernels.test_kernels_results import ALL_PASS, make_submission, shipped_contracts

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def signing_key_dir(settings, tmp_path):
    settings.AUDIT_SIGNING_KEY = ""
    settings.AUDIT_SIGNING_KEY_FILE = ""
    settings.AUDIT_SIGNING_KEY_DIR = tmp_path / "keys"
    return settings.AUDIT_SIGNING_KEY_DIR


def checks(body) -> dict:
    return {c["name"]: c for c in body["checks"]}


def run_page(client, owner, certificate):
    client.force_login(owner)
    return client.get(f"/p/{certificate.project.slug}/runs/{certificate.run_id}/").content.decode()


def verify_cli(bundle, *args, pinned=True):
    """The offline verifier as a user runs it, with the portal's published key set pinned (``--keys``, fetched the
    way the page says) unless ``pinned=False``; nothing from the machine's own config or environment is trusted."""
    bundle = Path(bundle)
    extra = []
    if pinned:
        keys = bundle.with_name("audit-portal-keys.json")
        keys.write_text(json.dumps(key_set()))
        extra = ["--keys", keys]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDIT_VERIFY_")}
    env["XDG_CONFIG_HOME"] = str(bundle.parent / "verifier-config")
    return subprocess.run(
        [sys.executable, "-m", "workers.verify", str(bundle), *map(str, args), *map(str, extra)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def download(api, kind, pk, tmp_path) -> Path:
    response = api.get(f"/api/v1/attestations/{kind}/{pk}/bundle/")
    assert response.status_code == 200, response.content
    assert "attachment" in response["Content-Disposition"]
    path = tmp_path / f"{kind}-{pk}.bundle.json"
    path.write_bytes(response.content)
    return path


def test_run_certificate_is_signed_logged_and_verifies_online_and_offline(
    api, project, client, owner, tmp_path, signing_key_dir
):
    certificate, _ = certified(api, project, records(trajectories=4))
    entry = LogEntry.objects.get(subject_kind="run_certificate", subject_id=certificate.pk)
    assert entry.project_id == project.pk and entry.predicate_type == st.RUN_CERTIFICATE_PREDICATE
    # the key was created at first use, mode 0600, and published
    key_file = signing_key_dir / "signing-key.pem"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = SigningKey.objects.get(status="active")
    assert entry.key_id == key.key_id
    for url in ("/api/v1/keys/", "/.well-known/audit-portal-keys.json"):
        published = {k["key_id"]: k for k in client.get(url).json()["keys"]}  # no credentials needed
        assert published[key.key_id]["status"] == "active" and published[key.key_id]["algorithm"] == "ed25519"

    body = api.get(f"/api/v1/attestations/run_certificate/{certificate.pk}/").json()
    assert body["ok"] is True, body
    assert {n: c["state"] for n, c in checks(body).items()} == {
        "keys": "ok",
        "signature": "ok",
        "statement": "ok",
        "subjects": "ok",
        "checkpoint": "ok",
        "inclusion": "ok",
        "consistency": "skipped",
        "witnesses": "skipped",
        "trust": "ok",
        "record": "ok",
    }
    subject = body["statement"]["subject"][0]
    assert subject["digest"]["sha256"] == certificate.upload.sha256 and subject["name"] == "r.jsonl.gz"
    assert body["statement"]["predicate"]["summary"]["sequences"] == certificate.sequences

    page = run_page(client, owner, certificate)
    assert 'data-state="verified"' in page and "python -m workers.verify run-certificate-" in page
    assert f"/api/v1/attestations/run_certificate/{certificate.pk}/bundle/" in page

    bundle = download(api, "run_certificate", certificate.pk, tmp_path)
    audited_file = tmp_path / "r.jsonl.gz"
    shutil.copy(artifact_path(certificate.upload.storage_name), audited_file)
    out = verify_cli(bundle, "--file", audited_file)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS  subjects" in out.stdout and "PASS  inclusion" in out.stdout and "PASS  trust" in out.stdout
    out = verify_cli(bundle, "--file", audited_file, pinned=False)  # the bundle's own keys vouch for nothing
    assert out.returncode == 3 and out.stdout.splitlines()[-1] == "UNPINNED"
    assert "--pin-keys audit-portal-keys.json" in page and "/.well-known/audit-portal-keys.json" in page

    # the audited file changed by one byte: the offline verifier and the API both name the subjects check
    data = bytearray(audited_file.read_bytes())
    data[len(data) // 2] ^= 0x01
    audited_file.write_bytes(bytes(data))
    out = verify_cli(bundle, "--file", audited_file)
    assert out.returncode == 1 and "verification failed: subjects:" in out.stderr
    artifact_path(certificate.upload.storage_name).write_bytes(bytes(data))
    body = api.get(f"/api/v1/attestations/run_certificate/{certificate.pk}/").json()
    assert body["ok"] is False and body["failed"] == ["subjects"]


def test_a_changed_certificate_row_fails_the_record_check(api, project, client, owner):
    certificate, _ = certified(api, project, records(trajectories=4))
    RunCertificate.objects.filter(pk=certificate.pk).update(
        eps_hat=0.0, summary={**certificate.summary, "eps_hat": 0.0}
    )
    body = api.get(f"/api/v1/attestations/run_certificate/{certificate.pk}/?files=0").json()
    assert body["failed"] == ["record"] and "changed after signing" in checks(body)["record"]["message"]
    assert checks(body)["signature"]["state"] == "ok"  # the signed statement itself is intact
    assert 'data-state="failed"' in run_page(client, owner, certificate)


def _disable_triggers():
    """Bypass the append-only triggers inside this test's transaction (rolled back afterwards)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for table in ("attestations_logentry", "attestations_checkpoint"):
                cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER {table}_append_only")
        else:
            for table in ("attestations_logentry", "attestations_checkpoint"):
                for op in ("update", "delete"):
                    cursor.execute(f"DROP TRIGGER {table}_no_{op}")


def test_the_database_refuses_to_change_the_log(api, project):
    certificate, _ = certified(api, project, records(trajectories=3))
    entry = LogEntry.objects.get(subject_kind="run_certificate", subject_id=certificate.pk)
    checkpoints = Checkpoint.objects.count()
    for attempt in (
        lambda: LogEntry.objects.filter(pk=entry.pk).update(envelope=entry.envelope + " "),
        lambda: LogEntry.objects.filter(pk=entry.pk).delete(),
        lambda: Checkpoint.objects.update(root_hash="00" * 32),
        lambda: Checkpoint.objects.all().delete(),
    ):
        with pytest.raises(DatabaseError, match="append-only"):
            with transaction.atomic():
                attempt()
    assert LogEntry.objects.get(pk=entry.pk).envelope == entry.envelope and Checkpoint.objects.count() == checkpoints
    assert selectors.verify_log().ok


def test_one_changed_byte_of_a_log_row_fails_verification(api, project):
    certificate, _ = certified(api, project, records(trajectories=3))
    entry = LogEntry.objects.get(subject_kind="run_certificate", subject_id=certificate.pk)
    _disable_triggers()
    # one byte of the signed payload inside the stored envelope
    env = json.loads(entry.envelope)
    payload = bytearray(base64.b64decode(env["payload"]))
    payload[payload.index(b'"summary"') + 2] ^= 0x01
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    from workers.verify import jcs

    LogEntry.objects.filter(pk=entry.pk).update(envelope=jcs.canonical(env).decode())
    report = selectors.verify_entry(LogEntry.objects.get(pk=entry.pk))
    failed = {c.name: c.message for c in report.failed}
    assert "signature" in failed and "inclusion" in failed
    assert "the log entry records" in failed["inclusion"]
    log = selectors.verify_log()
    assert not log.ok
    assert any(f"entry {entry.index}:" in p and "does not hash to its leaf hash" in p for p in log.problems)


def test_a_changed_leaf_hash_breaks_the_inclusion_proof(api, project):
    one, _ = certified(api, project, records(trajectories=3))
    two, _ = certified(api, project, records(trajectories=3, seed=2))
    first = LogEntry.objects.get(subject_kind="run_certificate", subject_id=one.pk)
    _disable_triggers()
    bad = bytearray.fromhex(first.leaf_hash)
    bad[-1] ^= 0x01
    LogEntry.objects.filter(pk=first.pk).update(leaf_hash=bad.hex())
    second = LogEntry.objects.get(subject_kind="run_certificate", subject_id=two.pk)  # its proof covers the first
    report = selectors.verify_entry(second)
    # the key introduction's inclusion proof (entry 0, whose sibling is the changed leaf) fails too: the key history
    # can no longer be proved against the checkpoint
    assert [c.name for c in report.failed] == ["keys", "inclusion"]
    assert "does not verify against root" in report.check("inclusion").message
    assert "key event 0 is not in the log" in report.check("keys").message
    assert not selectors.verify_log().ok


def test_a_rerun_appends_a_new_entry_and_the_page_shows_the_latest(api, project, client, owner):
    base = LogEntry.objects.count()  # the log is shared by every project (and outlives tests that commit)
    certificate, job = certified(api, project, records(trajectories=4))
    Job.objects.filter(pk=job.pk).update(state="queued")
    assert certify_upload(job.pk) == "succeeded"
    latest = RunCertificate.objects.get()
    assert latest.pk != certificate.pk
    # the first signature of a log introduces its key (an entry of its own, with its checkpoint) before the certificate
    k = 1 if base == 0 else 0
    assert list(LogEntry.objects.filter(index__gte=base).values_list("index", "subject_kind", "subject_id")) == [
        *([(0, "signing_key", 0)] if k else []),
        (base + k, "run_certificate", certificate.pk),
        (base + k + 1, "run_certificate", latest.pk),
    ]
    assert selectors.latest_entry("run_certificate", latest.pk).index == base + k + 1
    page = run_page(client, owner, latest)
    assert 'data-state="verified"' in page and f"#{base + k + 1}<" in page
    # the two checkpoints are consistent (RFC 6962 §2.1.2), through the public API
    first, second = base + k + 1, base + k + 2
    proof = client.get(f"/api/v1/log/consistency/?first={first}&second={second}").json()
    c1, c2 = Checkpoint.objects.filter(tree_size__gte=first).order_by("tree_size")
    assert (proof["first_root"], proof["second_root"]) == (c1.root_hash, c2.root_hash)
    assert merkle.verify_consistency(
        first,
        second,
        [bytes.fromhex(h) for h in proof["hashes"]],
        bytes.fromhex(c1.root_hash),
        bytes.fromhex(c2.root_hash),
    )
    result = selectors.verify_log()
    assert result.ok and result.tree_size == second and result.checkpoints_checked == second, result.problems


def test_a_signing_failure_fails_the_job_and_stores_no_certificate(api, project, settings, tmp_path):
    settings.AUDIT_SIGNING_KEY_FILE = str(tmp_path / "missing.pem")
    base = LogEntry.objects.count()
    with pytest.raises(AssertionError):
        certified(api, project, records(trajectories=3))
    upload_job = Job.objects.get(kind="certify_upload")
    assert upload_job.state == "failed"
    assert "signing the run certificate" in upload_job.error and "missing.pem" in upload_job.error
    assert not RunCertificate.objects.filter(state="complete").exists()
    assert LogEntry.objects.count() == base


def test_rotation_retires_the_old_key_and_both_certificates_still_verify(
    api, project, tmp_path, signing_key_dir, django_capture_on_commit_callbacks
):
    first, _ = certified(api, project, records(trajectories=3))
    old_id = SigningKey.objects.get(status="active").key_id
    with django_capture_on_commit_callbacks(execute=True):  # the new key file is put in place once the log commits
        call_command("rotate_signing_key")
    rotation = LogEntry.objects.filter(subject_kind="signing_key").order_by("-index").first()
    assert rotation.key_id == old_id  # the outgoing key signed the rotation
    second, _ = certified(api, project, records(trajectories=3, seed=5))
    keys = {k.key_id: k.status for k in SigningKey.objects.all()}
    assert keys[old_id] == "retired" and list(keys.values()).count("active") == 1
    new_id = next(k for k, s in keys.items() if s == "active")
    assert LogEntry.objects.get(subject_id=first.pk).key_id == old_id
    assert LogEntry.objects.get(subject_id=second.pk).key_id == new_id
    assert stat.S_IMODE((signing_key_dir / "signing-key.pem").stat().st_mode) == 0o600
    for cert in (first, second):
        out = verify_cli(download(api, "run_certificate", cert.pk, tmp_path))
        assert out.returncode == 0, out.stdout + out.stderr
    # the checkpoint of the old bundle's log state is now signed by the new key and still verifies
    assert "(retired)" in verify_cli(download(api, "run_certificate", first.pk, tmp_path)).stdout
    assert selectors.verify_log().ok


def test_other_projects_cannot_see_a_certificates_attestation(api, project, other_project, client):
    certificate, _ = certified(api, project, records(trajectories=3))
    client.force_login(other_project.memberships.get().user)
    for url in (
        f"/api/v1/attestations/run_certificate/{certificate.pk}/",
        f"/api/v1/attestations/run_certificate/{certificate.pk}/bundle/",
    ):
        assert client.get(url).status_code == 404
    assert api.get("/api/v1/attestations/not_a_kind/1/").status_code == 404


def test_fidelity_report_is_signed_and_its_page_shows_it(api, project, client, owner):
    report, _ = audited(api, project, examples())
    body = api.get(f"/api/v1/attestations/fidelity_report/{report.pk}/").json()
    assert body["ok"] is True, body
    assert body["statement"]["predicateType"] == st.FIDELITY_REPORT_PREDICATE
    assert body["statement"]["predicate"]["verdict"] == report.verdict
    assert body["statement"]["subject"][0]["digest"]["sha256"] == report.upload.sha256
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/runs/{report.run_id}/fidelity/").content.decode()
    assert 'data-state="verified"' in page and "fidelity-report-" in page


@pytest.fixture
def contracts(db):
    kernel_services.store_contracts(shipped_contracts())


def signed(submission):
    """Run the signing job finish_submission queued (the cpu-queue task: the kernels worker holds no key)."""
    from pipelines.kernels import sign_kernel_submission

    job = Job.objects.get(kind="kernel_signature", subject_id=submission.pk)
    assert sign_kernel_submission(job.pk) == "succeeded", Job.objects.get(pk=job.pk).error
    return submission


def test_kernel_conformance_result_is_an_in_toto_test_result(api, project, client, owner, contracts):
    passed = signed(make_submission(project, "vendor.kernels", ALL_PASS))
    failed = signed(
        make_submission(project, "vendor.kernels", {**ALL_PASS, "C-PRC-01": "FAIL", "C-EXC-02": "QUALITY_WARNING"})
    )
    body = api.get(f"/api/v1/attestations/kernel_submission/{passed.pk}/").json()
    assert body["ok"] is True, body
    predicate = body["statement"]["predicate"]
    assert body["statement"]["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert predicate["result"] == "PASSED" and len(predicate["passedTests"]) == len(ALL_PASS)
    assert all(len(c["digest"]["sha256"]) == 64 for c in predicate["configuration"])
    predicate = api.get(f"/api/v1/attestations/kernel_submission/{failed.pk}/").json()["statement"]["predicate"]
    assert predicate["result"] == "FAILED"
    assert [t.split("/")[0] for t in predicate["failedTests"]] == ["C-PRC-01"]
    assert [t.split("/")[0] for t in predicate["warnedTests"]] == ["C-EXC-02"]
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/kernels/submissions/{passed.pk}/").content.decode()
    assert 'data-state="verified"' in page and "kernel-submission-" in page


def test_an_uploaded_kernel_module_is_the_subject(api, project, contracts, tmp_path):
    code = b"import torch\n\ndef matmul(a, b):\n    return a @ b\n"
    submission = kernel_services.submit_conformance(
        project=project,
        submitted_by="test",
        device="cpu",
        contracts=["C-PRC-01"],
        module=check_kernel_module(code, "mine.py"),
        module_filename="mine.py",
        function="matmul",
    )
    signed(kernel_services.finish_submission(submission, {"kc_c": {}}))
    body = api.get(f"/api/v1/attestations/kernel_submission/{submission.pk}/").json()
    assert body["statement"]["subject"] == [
        {"name": "mine.py", "digest": {"sha256": __import__("hashlib").sha256(code).hexdigest()}}
    ]
    assert body["ok"] is True and checks(body)["subjects"]["state"] == "ok", body
    (tmp_path / "mine.py").write_bytes(code)
    out = verify_cli(download(api, "kernel_submission", submission.pk, tmp_path), "--file", tmp_path / "mine.py")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    "not __import__('os').environ.get('DATABASE_URL', '').startswith('postgres')",
    reason="concurrent writers need PostgreSQL (SQLite serialises them by locking the file)",
)
def test_concurrent_appends_never_share_an_index(project):
    upload = Upload.objects.create(
        project=project, original_name="x.jsonl", sha256="ab" * 32, size_bytes=1, storage_name="none"
    )
    cert = RunCertificate.objects.create(project=project, upload=upload, state="complete")
    base = LogEntry.objects.count()
    errors = []

    def worker():
        try:
            for _ in range(3):
                with transaction.atomic():
                    services.attest_run_certificate(cert)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    k = 1 if base == 0 else 0  # the first signature introduced the key (one entry, one checkpoint)
    assert sorted(LogEntry.objects.values_list("index", flat=True)) == list(range(base + k + 18))
    assert sorted(Checkpoint.objects.filter(tree_size__gt=base).values_list("tree_size", flat=True)) == list(
        range(base + 1, base + k + 19)
    )
    assert LogEntry.objects.filter(subject_kind="signing_key").count() == 1
    result = selectors.verify_log()
    assert result.ok and result.tree_size == base + k + 18, result.problems


SQLITE_PROBE = """
import os
os.environ['DJANGO_SETTINGS_MODULE'] = 'audit_portal.settings'
import django
django.setup()
from django.db import DatabaseError, connection, transaction
from audit_portal.attestations.models import Checkpoint, LogEntry
assert connection.vendor == 'sqlite', connection.vendor
entry = LogEntry.objects.create(index=0, leaf_hash='00' * 32, envelope='{}', predicate_type='t',
                                subject_kind='run_certificate', subject_id=1, key_id='k')
Checkpoint.objects.create(tree_size=1, root_hash='00' * 32, envelope='{}', key_id='k')
for attempt in (lambda: LogEntry.objects.filter(pk=entry.pk).update(envelope='{ }'),
                lambda: LogEntry.objects.all().delete(),
                lambda: Checkpoint.objects.update(root_hash='11' * 32),
                lambda: Checkpoint.objects.all().delete()):
    try:
        with transaction.atomic():
            attempt()
    except DatabaseError as exc:
        print('refused:', exc)
    else:
        print('ALLOWED')
print(LogEntry.objects.get().envelope, Checkpoint.objects.get().root_hash == '00' * 32)
# flush empties everything, as TRUNCATE does on PostgreSQL, and leaves the triggers in place
from django.core.management import call_command
call_command('flush', '--noinput', verbosity=0)
print('after flush:', LogEntry.objects.count(), Checkpoint.objects.count())
entry = LogEntry.objects.create(index=0, leaf_hash='00' * 32, envelope='{}', predicate_type='t',
                                subject_kind='run_certificate', subject_id=1, key_id='k')
try:
    LogEntry.objects.filter(pk=entry.pk).delete()
    print('ALLOWED after flush')
except DatabaseError as exc:
    print('still refused:', exc)
"""


@pytest.mark.slow
def test_sqlite_embedded_mode_refuses_changes_to_the_log_too_and_flush_keeps_the_triggers(tmp_path):
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE")
    }
    env["AUDIT_VAR_DIR"] = str(tmp_path)
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stderr
    out = subprocess.run(
        [sys.executable, "-c", SQLITE_PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len([line for line in lines if line.startswith("refused:") and "append-only" in line]) == 4, out.stdout
    assert "ALLOWED" not in out.stdout and lines[-3] == "{} True" and lines[-2] == "after flush: 0 0"
    assert lines[-1].startswith("still refused:") and "append-only" in lines[-1]


def test_a_pinned_checkpoint_is_extended_by_a_later_bundle(api, project, client, tmp_path):
    first, _ = certified(api, project, records(trajectories=3))
    since = tmp_path / "since.json"
    since.write_bytes(client.get("/api/v1/log/checkpoint/").content)  # what a user saved after the first one
    size = json.loads(base64.b64decode(json.loads(since.read_text())["payload"]))["tree_size"]
    second, _ = certified(api, project, records(trajectories=3, seed=7))
    response = api.get(f"/api/v1/attestations/run_certificate/{second.pk}/bundle/?consistency_from={size}")
    assert response.status_code == 200 and response.json()["consistency_proof"]["first"] == size
    bundle = tmp_path / "second.bundle.json"
    bundle.write_bytes(response.content)
    out = verify_cli(bundle, "--since", since)
    assert out.returncode == 0 and "PASS  consistency" in out.stdout, out.stdout + out.stderr
    out = verify_cli(download(api, "run_certificate", second.pk, tmp_path), "--since", since)
    assert out.returncode == 1 and f"consistency_from={size}" in out.stderr  # the plain bundle says what to fetch
    bad = api.get(f"/api/v1/attestations/run_certificate/{second.pk}/bundle/?consistency_from=999999")
    assert bad.status_code == 404 and "consistency_from" in bad.json()["error"]["message"]


def test_a_run_whose_trainer_log_probs_reach_minus_40_certifies_and_signs(api, project, tmp_path):
    """exp(40) ≈ 2.35e17 > 2^53: the perplexity metrics leave the exact-integer range of a JSON number, are stored
    as JSON and read back as Python integers — which RFC 8785 refuses unless mapped (workers/verify/jcs.py)."""
    recs = records(trajectories=3)
    for r in recs:
        if r["role"] == "policy":
            r["trainer"]["logprobs"] = [-40.0] * len(r["trainer"]["logprobs"])
            r["trainer"]["top_k"] = None
    certificate, _ = certified(api, project, recs)
    entry = LogEntry.objects.get(subject_kind="run_certificate", subject_id=certificate.pk)
    signed = json.loads(base64.b64decode(json.loads(entry.envelope)["payload"]))
    assert max(_numbers(signed)) >= 2**53, "the run no longer produces a metric beyond 2^53"
    body = api.get(f"/api/v1/attestations/run_certificate/{certificate.pk}/?files=0").json()
    assert body["ok"] is True and checks(body)["record"]["state"] == "ok", body
    assert selectors.verify_log().ok
    out = verify_cli(download(api, "run_certificate", certificate.pk, tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr


def _numbers(value):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield abs(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
