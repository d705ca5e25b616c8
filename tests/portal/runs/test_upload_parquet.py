"""fcr-parquet/1 uploads through the API: the pre-flight reads the footer and the first rows (a bad file is a 4xx
naming the row or column and nothing is stored), the validation job streams the row groups, the upload joins its
run, and the certificate job certifies it."""

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit_portal.jobs.models import Job
from audit_portal.runs.models import Run, Upload, UploadStage
from workers.fcr.parquet_write import Writer
from pipelines import certify_upload, validate_upload

from ..conftest import as_file, gz, records, stored_files, upload_url

pytestmark = pytest.mark.django_db


def parquet_bytes(recs, tmp_path, name="run.parquet") -> bytes:
    path = tmp_path / name
    with Writer(path, row_group_tokens=200) as w:
        for r in recs:
            w.add(r)
    return path.read_bytes()


def test_a_parquet_upload_is_validated_joins_its_run_and_is_certified(api, project, tmp_path):
    recs = records(trajectories=8)
    response = api.post(
        upload_url(project), {"file": as_file(parquet_bytes(recs, tmp_path), "run.parquet")}, format="multipart"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["format"] == "fcr-parquet/1" and body["compression"] == "none"
    upload = Upload.objects.get(pk=body["id"])
    assert upload.storage_name.endswith(".parquet")
    assert validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk) == "succeeded"
    upload.refresh_from_db()
    assert upload.stage == UploadStage.VALID and upload.validation["records"] == len(recs)
    assert upload.validation["format"] == "fcr-parquet/1"
    assert upload.run == Run.objects.get(project=project, name="demo-run")
    assert certify_upload(Job.objects.get(subject_id=upload.pk, kind="certify_upload").pk) == "succeeded"
    upload.refresh_from_db()
    cert = upload.certificate
    assert cert.summary["records"] == len(recs) and cert.data_errors == 0
    assert all(s.metrics.get("tokens") for s in cert.steps.all())


def test_a_bad_row_in_the_head_is_refused_with_its_row_and_nothing_is_stored(api, project, settings, tmp_path):
    data = parquet_bytes(records(trajectories=4), tmp_path)
    t = pq.read_table(io.BytesIO(data))
    meta = t.column("meta_json").to_pylist()
    meta[1] = meta[1].replace('"provenance":"engine"', '"provenance":"guessed"', 1)
    t = t.set_column(t.schema.get_field_index("meta_json"), "meta_json", pa.array(meta))
    buf = io.BytesIO()
    pq.write_table(t, buf)
    response = api.post(upload_url(project), {"file": as_file(buf.getvalue(), "bad.parquet")}, format="multipart")
    assert response.status_code == 400, response.content
    err = response.json()["error"]
    assert err["code"] == "invalid_run_log" and err["message"].startswith("row 2: ")
    assert "provenance" in err["message"]
    assert not Upload.objects.exists() and not stored_files(settings)


def test_a_foreign_parquet_file_and_a_gzipped_one_are_refused(api, project, settings, tmp_path):
    buf = io.BytesIO()
    pq.write_table(pa.table({"x": [1, 2, 3]}), buf)
    response = api.post(upload_url(project), {"file": as_file(buf.getvalue(), "other.parquet")}, format="multipart")
    assert response.status_code == 400 and "fcr.format" in response.json()["error"]["message"]
    good = parquet_bytes(records(trajectories=2), tmp_path)
    response = api.post(upload_url(project), {"file": as_file(gz(good), "run.parquet.gz")}, format="multipart")
    assert response.status_code == 415 and "gzip-compressed Parquet" in response.json()["error"]["message"]
    assert not Upload.objects.exists() and not stored_files(settings)
