"""The fidelity-audit job on real uploads: the worked examples A, C and D of docs/fcr.md as an
uploaded file are the oracle; reruns replace rather than duplicate; the project's registered tokenizer is used when
a record declares its hash; the loss-mask export lands in the artifact store in both formats."""

from __future__ import annotations

import copy
import json

import pytest

from audit_portal.fidelity.models import FidelityCall, FidelityReport
from audit_portal.jobs.models import Job
from audit_portal.runs.models import Upload
from pipelines import fidelity_audit, validate_upload

from ..conftest import as_file, gz, jsonl, records, upload_url

pytestmark = pytest.mark.django_db

# ---------------------------------------------------------------------------------- worked examples of docs/fcr.md
TOY_VOCAB_TEXT = (
    '{"0":"<|system|>","1":"<|user|>","10":"H","11":"AV","12":"ING","13":"HAV","2":"<|assistant|>",'
    '"20":"ls","21":" -la","22":"\\n","24":" -l","3":"<|end|>","33":"Title","34":":","35":" Listing",'
    '"40":"You","41":" are","42":" an","43":" agent","44":"List","45":" files","46":".","47":"Say",'
    '"48":" it"}'
)
TOY_TOKENIZER_SHA = "100487659ed21cf0c9ec3649a3e2d3ed74759bbb416eff4dab4f6c72a31accd8"
TOY_TEMPLATE_SHA = "64caafe4aacf4c1466fa74060730180df25fd866303ee54059c14967ed5f6b68"
TASK_LIST_FILES = "e700817c9d5ece144fe01c5bdfcc54007ca08434e37552df72e6702a25096c43"

SHARED = {
    "schema": "fcr/1",
    "run_id": "run-toy",
    "step": 7,
    "model": {"served_name": "toy-policy", "policy_version": 7},
    "tokenizer": {"id": "toy", "sha256": TOY_TOKENIZER_SHA},
    "chat_template": {"sha256": TOY_TEMPLATE_SHA},
    "engine": {
        "name": "vllm",
        "api": "chat.completions",
        "logprobs_mode": "processed_logprobs",
        "generation_config_source": "request_only",
    },
    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1},
}

EXAMPLE_A = """{"trajectory_id":"tA","call_id":"tA-0","call_index":0,"role":"policy","role_source":"header","purpose":"main_loop",
 "prompt":{"token_ids":[0,40,41,42,43,46,3,1,44,45,3,2],"provenance":"engine",
   "ids_sha256":"19eb1dc19d1033a1b2955eeeefdd1e4966f848bab91bef799d96c4621a20d52a",
   "task_prompt_sha256_declared":"e700817c9d5ece144fe01c5bdfcc54007ca08434e37552df72e6702a25096c43",
   "task_prompt_sha256_observed":"e700817c9d5ece144fe01c5bdfcc54007ca08434e37552df72e6702a25096c43"},
 "response":{"token_ids":[20,21,3],"provenance":"engine",
   "ids_sha256":"3a9b0683f5348d240de8f728cf9bd28fdbf69408947e2a46b1700db6c1d95566",
   "text":null,"usage_completion_tokens":3,"finish_reason":"stop"},
 "rollout":{"logprobs":[-0.105361,-0.510826,-0.01005],
   "top_k":[[[20,-0.105361],[24,-2.995732]],[[21,-0.510826],[24,-1.203973]],[[3,-0.01005],[22,-5.298317]]]},
 "trainer":{"logprobs":[-0.127833,-0.693147,-0.01005],
   "top_k":[[[20,-0.127833],[24,-2.813411]],[[21,-0.693147],[24,-0.916291]],[[3,-0.01005],[22,-5.115996]]],
   "loss_mask_used":[1,1,1],"sample_id":"tA-0"},
 "source":{"format":"vllm_openai_chat","ref":"gateway.jsonl:1"}}"""

EXAMPLE_C = """{"trajectory_id":"tA","call_id":"tA-bg-1","call_index":1,"role":"background","role_source":"header","purpose":"title",
 "sampling":{"temperature":1.0,"top_p":1.0,"top_k":-1,"max_tokens":32},
 "prompt":{"token_ids":[0,33,34,3,1,44,45,3,2],"provenance":"engine",
   "ids_sha256":"2f5628b4d8dd3d2f2a3d46dcc9a4f9d6604794a7a1d09d3bc4dac047d3edbbac",
   "task_prompt_sha256_declared":null,"task_prompt_sha256_observed":null},
 "response":{"token_ids":[35,3],"provenance":"engine",
   "ids_sha256":"db6c87d90151d335a6a163251bd46e7ee7130301a9d2ba338e21b18b5eabdfe1","usage_completion_tokens":2},
 "rollout":{"logprobs":[-1.2,-0.05]},
 "source":{"format":"vllm_openai_chat","ref":"gateway.jsonl:2"}}"""


def _record(text_or_dict, **over) -> dict:
    body = json.loads(text_or_dict) if isinstance(text_or_dict, str) else text_or_dict
    rec = {**copy.deepcopy(SHARED), **body, **over}
    rec.setdefault("trainer", {})["policy_version"] = 7  # "trainer.policy_version: 7" is a shared field
    return rec


def example_a() -> dict:
    return _record(EXAMPLE_A)


def example_c() -> dict:
    return _record(EXAMPLE_C)


def example_d() -> dict:
    """Example D (docs/fcr.md) in prose: Example A's prompt (root, task hashes match), response [20,24,22,3], a sentinel at 2."""
    a = json.loads(EXAMPLE_A)
    return _record(
        {
            "trajectory_id": "tD",
            "call_id": "tD-0",
            "call_index": 0,
            "role": "policy",
            "role_source": "header",
            "purpose": "main_loop",
            "prompt": a["prompt"],
            "response": {
                "token_ids": [20, 24, 22, 3],
                "provenance": "engine",
                "ids_sha256": "2639a5f5ca370db0ca0517188fcf4fa87d361d1d7d4f6205647fa1598cea5b01",
                "usage_completion_tokens": 4,
            },
            "rollout": {"logprobs": [-0.2, -0.7, -9999.0, -0.01]},
            "trainer": {"logprobs": [-0.21, -0.69, -3.2, -0.01], "loss_mask_used": [1, 1, 1, 1]},
            "source": {"format": "vllm_openai_chat", "ref": "gateway.jsonl:3"},
        }
    )


def examples() -> list[dict]:
    return [example_a(), example_c(), example_d()]


def ids_sha256(ids) -> str:
    """SHA-256 of the ids joined by "," (docs/fcr.md#conventions)."""
    import hashlib

    return hashlib.sha256(",".join(map(str, ids)).encode("ascii")).hexdigest()


def example_drift() -> dict:
    """The toy tokenizer (docs/fcr.md#toy-tokenizer): the engine sampled [10,11,12,3] while encode("HAVING<|end|>") = [13,12,3]; the text is logged, so R4
    needs the tokenizer (closed failure without one) and the drift diagnostic fires with it."""
    rec = _record(EXAMPLE_A, trajectory_id="tH", call_id="tH-0")
    rec["response"] = {
        "token_ids": [10, 11, 12, 3],
        "provenance": "engine",
        "ids_sha256": ids_sha256([10, 11, 12, 3]),
        "text": "HAVING<|end|>",
        "usage_completion_tokens": 4,
    }
    rec["rollout"] = {"logprobs": [-0.3, -0.2, -0.1, -0.01]}
    rec["trainer"] = {
        "policy_version": 7,
        "logprobs": [-0.31, -0.21, -0.1, -0.01],
        "loss_mask_used": [1, 1, 1, 1],
        "sample_id": "tH-0",
    }
    return rec


# ---------------------------------------------------------------------------------------------- helpers
def audited(api, project, recs, *, compress=False, name="run.jsonl"):
    data = jsonl(recs)
    response = api.post(
        upload_url(project),
        {"file": as_file(gz(data) if compress else data, name + (".gz" if compress else ""))},
        format="multipart",
    )
    assert response.status_code == 201, response.content
    upload = Upload.objects.get(pk=response.json()["id"])
    validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk)
    job = Job.objects.get(subject_id=upload.pk, kind="fidelity_audit")  # queued by a valid validation
    assert fidelity_audit(job.pk) == "succeeded", Job.objects.get(pk=job.pk).error
    return FidelityReport.objects.get(upload=upload), job


def register_toy(api, project):
    response = api.post(
        f"/api/v1/projects/{project.slug}/tokenizers/",
        {"file": as_file(TOY_VOCAB_TEXT.encode(), "toy-vocab.json"), "name": "toy"},
        format="multipart",
    )
    assert response.status_code == 201, response.content
    return response.json()


# ---------------------------------------------------------------------------------------------- tests
def test_worked_examples_give_the_spec_verdicts(api, project):
    report, job = audited(api, project, examples())
    by_id = {c.call_id: c for c in FidelityCall.objects.filter(report=report)}
    assert set(by_id) == {"tA-0", "tA-bg-1", "tD-0"}
    a, c, d = by_id["tA-0"], by_id["tA-bg-1"], by_id["tD-0"]
    # Example A: fully verifiable, one span, lineage root-ok, alignment median |Δ| = 0.022472
    assert a.verdict == "verifiable" and a.span_dicts() == [{"start": 0, "end": 3, "verifiable": True, "reasons": []}]
    assert a.lineage == "root-ok" and a.alignment["median_abs_diff"] == pytest.approx(0.022472, abs=1e-6)
    # Example C: excluded 2/2, BACKGROUND_CALL, not in the policy-token denominator, no violation
    assert (c.verdict, c.primary_reason, c.verifiable_tokens, c.n_tokens) == ("excluded", "BACKGROUND_CALL", 0, 2)
    assert c.closed_failure_violations == 0
    # Example D: partial, spans [0,2) ok, [2,3) SENTINEL_LOGPROB, [3,4) ok; median |Δ| = 0.01; one violation
    assert d.verdict == "partial"
    assert d.span_dicts() == [
        {"start": 0, "end": 2, "verifiable": True, "reasons": []},
        {"start": 2, "end": 3, "verifiable": False, "reasons": ["SENTINEL_LOGPROB"]},
        {"start": 3, "end": 4, "verifiable": True, "reasons": []},
    ]
    assert d.alignment["median_abs_diff"] == pytest.approx(0.01, abs=1e-9) and d.closed_failure_violations == 1
    # run level: FAIL with exactly one closed-failure violation
    assert report.verdict == "FAIL" and report.closed_failure_violations == 1
    assert report.coverage["background_ledger"] == {"background:title": {"calls": 1, "tokens": 2}}
    assert (report.policy_tokens, report.verifiable_policy_tokens) == (3 + 4, 3 + 3)
    assert report.coverage["trajectories"]["min_coverage"] == pytest.approx(3 / 4)
    assert report.calls_total == 3 and report.spurious_call_rate == 0
    # no tokenizer registered: the page must say none matched the declared hash
    assert report.tokenizers["used"] == [] and report.tokenizers["unmatched"] == [TOY_TOKENIZER_SHA]
    result = Job.objects.get(pk=job.pk).result
    assert result["report"] == report.pk and result["verdict"] == "FAIL"


def test_mask_export_in_both_formats(api, project, settings):
    from workers.fidelity import read_masks

    report, _ = audited(api, project, examples())
    expected = {
        "tA-0": [1, 1, 1],
        "tA-bg-1": [0, 0],
        "tD-0": [1, 1, 0, 1],
    }  # verifiable ∧ policy (docs/fidelity-rules.md#definitions)
    for fmt in ("jsonl", "bin"):
        path = settings.ARTIFACT_ROOT / report.mask_export["files"][fmt]["storage_name"]
        assert str(path).startswith(str(settings.ARTIFACT_ROOT / "fidelity"))
        assert {cid: m.astype(int).tolist() for cid, m in read_masks(path)} == expected, fmt
    assert path.read_bytes().startswith(b"FCRMASK1")
    assert report.mask_export["tokens_on"] == 6


def test_rerun_replaces_rather_than_duplicates(api, project, settings):
    report, job = audited(api, project, examples())
    Job.objects.filter(pk=job.pk).update(state="queued")  # a redelivery after a lost worker
    assert fidelity_audit(job.pk) == "succeeded"
    assert FidelityReport.objects.count() == 1
    again = FidelityReport.objects.get()
    assert FidelityCall.objects.count() == FidelityCall.objects.filter(report=again).count() == 3
    assert again.verdict == "FAIL" and again.closed_failure_violations == 1
    for entry in again.mask_export["files"].values():
        assert (settings.ARTIFACT_ROOT / entry["storage_name"]).exists()
    assert not list((settings.ARTIFACT_ROOT / "fidelity" / "tmp").iterdir())  # scratch cleaned up


def test_registered_tokenizer_is_used_for_drift_and_the_text_rule(api, project):
    body = register_toy(api, project)
    assert (
        body["sha256"] == TOY_TOKENIZER_SHA and body["kind"] == "toy_vocab"
    )  # the toy tokenizer's documented hash (docs/fcr.md#toy-tokenizer)
    report, _ = audited(api, project, examples() + [example_drift()], name="with-tokenizer.jsonl")
    assert [t["sha256"] for t in report.tokenizers["used"]] == [TOY_TOKENIZER_SHA]
    assert report.tokenizers["unmatched"] == []
    calls = {c.call_id: c for c in FidelityCall.objects.filter(report=report)}
    assert calls["tA-0"].drift_if_retokenized is False  # encode("ls -la<|end|>") = [20,21,3]
    assert calls["tH-0"].drift_if_retokenized is True and calls["tH-0"].verdict == "verifiable"
    assert report.coverage["drift"]["calls_drifting_if_retokenized"] == 1


def test_without_the_tokenizer_the_text_rule_fails_closed(api, project):
    report, _ = audited(api, project, [example_drift()], name="no-tokenizer.jsonl")
    call = FidelityCall.objects.get(report=report)
    assert call.primary_reason == "R4_NOT_EVALUABLE" and call.verdict == "excluded"
    assert call.drift_if_retokenized is None
    assert report.closed_failure_violations == 4 and report.verdict == "FAIL"  # all 4 were used in the loss
    assert report.tokenizers["unmatched"] == [TOY_TOKENIZER_SHA]


def test_realistic_synthetic_run_gzip(api, project):
    recs = records(trajectories=8)
    report, _ = audited(api, project, recs, compress=True)
    stored = FidelityCall.objects.filter(report=report)
    assert stored.count() == report.calls_total == len(recs)
    assert stored.filter(byte_offset__isnull=False).count() == 0  # gzip: the drill-down streams instead
    last = stored.order_by("-line").first()
    body = api.get(f"/api/v1/fidelity/calls/{last.pk}/?tokens=true").json()
    assert [t["id"] for t in body["tokens"]["tokens"]] == recs[-1]["response"]["token_ids"]
    policy = [r for r in recs if r["role"] == "policy"]
    assert report.policy_tokens == sum(len(r["response"]["token_ids"]) for r in policy)
    background = {r["call_id"] for r in recs if r["role"] == "background"}
    assert set(stored.filter(primary_reason="BACKGROUND_CALL").values_list("call_id", flat=True)) == background
    assert sum(stored.values_list("closed_failure_violations", flat=True)) == report.closed_failure_violations
    assert report.coverage["certificates"]["verifiable_tokens"] == report.verifiable_policy_tokens


def test_plain_upload_drill_down_reads_the_line_at_its_offset(api, project):
    # the drill-down reads one line at the stored offset through the bounded reader, which checks that the offset is
    # a line start: an offset that is not one is refused instead of parsing half a line
    recs = records(trajectories=3)
    report, _ = audited(api, project, recs)
    stored = FidelityCall.objects.filter(report=report)
    assert stored.filter(byte_offset__isnull=True).count() == 0  # plain: every call has its line's offset
    last = stored.order_by("-line").first()
    body = api.get(f"/api/v1/fidelity/calls/{last.pk}/?tokens=true").json()
    assert [t["id"] for t in body["tokens"]["tokens"]] == recs[-1]["response"]["token_ids"]
    FidelityCall.objects.filter(pk=last.pk).update(byte_offset=last.byte_offset + 1)
    response = api.get(f"/api/v1/fidelity/calls/{last.pk}/?tokens=true")
    assert response.status_code == 400 and response.json()["error"]["code"] == "record_unavailable"
    assert "not the start of a line" in response.json()["error"]["message"]


def test_an_unreadable_registered_tokenizer_fails_closed_not_the_job(api, project, settings):
    from audit_portal.fidelity import services
    from audit_portal.fidelity.models import RegisteredTokenizer

    register_toy(api, project)
    stored = RegisteredTokenizer.objects.get(project=project)
    (settings.ARTIFACT_ROOT / stored.storage_name).write_text("{ truncated")
    services._load.cache_clear()  # the per-process cache would otherwise still hold the good copy
    report, job = audited(api, project, [example_drift()], name="bad-tokenizer.jsonl")
    assert Job.objects.get(pk=job.pk).state == "succeeded"
    assert report.tokenizers["used"] == [] and report.tokenizers["unmatched"] == [TOY_TOKENIZER_SHA]
    assert TOY_TOKENIZER_SHA in report.tokenizers["load_errors"]
    assert FidelityCall.objects.get(report=report).primary_reason == "R4_NOT_EVALUABLE"
    services._load.cache_clear()


def test_drill_down_says_when_the_upload_is_gone(client, api, project, owner, settings):
    report, _ = audited(api, project, examples())
    (settings.ARTIFACT_ROOT / report.upload.storage_name).unlink()
    call = FidelityCall.objects.get(report=report, call_id="tA-0")
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/fidelity/calls/{call.pk}/")
    assert page.status_code == 200 and "no longer in the artifact store" in page.content.decode()
    response = api.get(f"/api/v1/fidelity/calls/{call.pk}/?tokens=true")
    assert response.status_code == 400 and response.json()["error"]["code"] == "record_unavailable"
    assert api.get(f"/api/v1/fidelity/calls/{call.pk}/").json()["verdict"] == "verifiable"  # summaries stay


def test_variant_c_prime_undeclared_role_is_spurious(api, project):
    """Example C′ (docs/fcr.md#example-c-a-background-call): the same request without the header → role unknown/default, inferred_purpose title →
    ROLE_UNVERIFIED, spurious-call rate > 0, protocol warning."""
    c_prime = example_c()
    c_prime.update(role="unknown", role_source="default", inferred_purpose="title")
    c_prime.pop("purpose")
    report, _ = audited(api, project, [example_a(), c_prime], name="c-prime.jsonl")
    call = FidelityCall.objects.get(report=report, call_id="tA-bg-1")
    assert (call.verdict, call.primary_reason, call.inferred_purpose) == ("excluded", "ROLE_UNVERIFIED", "title")
    assert report.spurious_call_rate == pytest.approx(1 / 2)
    assert report.protocol_warnings and report.verdict == "PASS"  # nothing unverifiable was trained on
    assert report.coverage["background_ledger"] == {"unknown:title": {"calls": 1, "tokens": 2}}


# ---------------------------------------------------------------------------------------------- streaming
def test_call_rows_are_inserted_batch_by_batch_with_progress(api, project, monkeypatch):
    """The job stores call summaries as the engine streams them (several bulk inserts, not one at the end) and
    reports the engine's progress (bytes read, then verdicts stored) through the job's ProgressReporter."""
    from audit_portal.fidelity import services
    from audit_portal.jobs.execution import ProgressReporter
    from workers.fidelity import audit_file
    from pipelines import fidelity as task

    monkeypatch.setattr(task, "CALL_BATCH", 5)
    inserts = []
    add_calls = services.add_calls
    monkeypatch.setattr(
        services, "add_calls", lambda report, entries: inserts.append(len(entries)) or add_calls(report, entries)
    )
    seen = []
    call = ProgressReporter.__call__

    def record(self, fraction=None, message="", force=False):
        if self.job.kind == "fidelity_audit":  # (the upload's validation job reports too)
            seen.append((self.start + self.span * fraction if fraction is not None else None, message))
        return call(self, fraction, message, force)

    monkeypatch.setattr(ProgressReporter, "__call__", record)
    recs = records(trajectories=10)
    report, job = audited(api, project, recs, name="streamed.jsonl")
    stored = FidelityCall.objects.filter(report=report)
    assert len(inserts) == -(-len(recs) // 5) >= 5 and set(inserts[:-1]) == {5}
    assert stored.count() == report.calls_total == len(recs)
    # rows equal what the engine reports for the same file, line offsets included
    engine = {e["line"]: e for e in audit_file(task.runs.artifact_path(report.upload.storage_name))["calls"]}
    for row in stored:
        e = engine[row.line]
        assert (row.call_id, row.verdict, row.primary_reason, row.byte_offset, row.verifiable_tokens) == (
            e["call_id"],
            e["verdict"],
            e["primary_reason"] or "",
            e["byte_offset"],
            e["verifiable_tokens"],
        )
    fractions = [f for f, _ in seen if f is not None]
    assert all(a <= b for a, b in zip(fractions, fractions[1:]))
    reading = [f for f, m in seen if "of the file read" in m]
    storing = [f for f, m in seen if m.startswith("stored ")]
    assert len(reading) >= 10 and 0.02 <= min(reading) and max(reading) <= 0.02 + 0.93 * 0.9 + 1e-9
    assert len(storing) == len(recs) // 5 and all(0.02 + 0.93 * 0.9 - 1e-9 <= f <= 0.95 + 1e-9 for f in storing)
    assert Job.objects.get(pk=job.pk).progress == 1.0


def test_an_attempt_whose_report_was_replaced_stops_without_writing(api, project, monkeypatch):
    """A stale attempt (its worker stalled while a redelivery started over) must not write rows into the report the
    newer attempt replaced, nor touch the job; rerunning leaves exactly one set of rows."""
    from audit_portal.fidelity import services
    from pipelines import fidelity as task

    recs = records(trajectories=4)
    report, job = audited(api, project, recs)
    assert FidelityCall.objects.count() == len(recs)
    monkeypatch.setattr(task, "CALL_BATCH", 5)
    add_calls = services.add_calls
    state = {"batches": 0}

    def newer_attempt_starts_midway(report, entries):
        state["batches"] += 1
        if state["batches"] == 2:  # a newer attempt begins: the report this attempt writes into is replaced
            services.begin(report.upload, {})
        return add_calls(report, entries)

    monkeypatch.setattr(services, "add_calls", newer_attempt_starts_midway)
    Job.objects.filter(pk=job.pk).update(state="queued")
    assert fidelity_audit(job.pk) == "cancelled"  # stopped, and the job is left to the newer attempt
    assert Job.objects.get(pk=job.pk).state == "running"
    assert FidelityReport.objects.count() == 1 and FidelityCall.objects.count() == 0  # the newer report's rows only
    with pytest.raises(services.ReportSuperseded):
        add_calls(report, [{"line": 1, "verdict": "verifiable"}])  # the first report is gone too
    monkeypatch.setattr(services, "add_calls", add_calls)
    Job.objects.filter(pk=job.pk).update(state="queued")
    assert fidelity_audit(job.pk) == "succeeded"
    final = FidelityReport.objects.get()
    assert FidelityCall.objects.count() == FidelityCall.objects.filter(report=final).count() == len(recs)


def test_a_replaced_report_is_never_completed_again(api, project):
    """complete() on a report a newer attempt replaced raises instead of re-inserting it under its old id."""
    from audit_portal.fidelity import services

    report, _ = audited(api, project, examples())
    newer = services.begin(report.upload, {})
    with pytest.raises(services.ReportSuperseded):
        services.complete(report, {"verdict": "PASS", "coverage": {}}, tokenizers={}, masks={})
    assert list(FidelityReport.objects.values_list("pk", flat=True)) == [newer.pk]
