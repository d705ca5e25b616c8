"""audit_file over real files: gzip, truncation, broken lines, order independence, mask export, CLI."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys

import numpy as np
import orjson
import pytest

from workers.fidelity import audit_file, audit_records, read_masks

from .conftest import EXAMPLE_A, EXAMPLE_C, EXAMPLE_D, TOY_VOCAB_JSON
from .helpers import by_id, dumps, variant

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def many(n=30):
    """A trajectory per example-A copy, with some sentinel / background calls mixed in."""
    out = []
    for i in range(n):
        out.append(variant(EXAMPLE_A, trajectory_id=f"t{i}", call_id=f"t{i}-0"))
        if i % 3 == 0:
            out.append(variant(EXAMPLE_C, trajectory_id=f"t{i}", call_id=f"t{i}-bg"))
        if i % 5 == 0:
            out.append(
                variant(EXAMPLE_D, trajectory_id=f"d{i}", call_id=f"d{i}-0", **{"trainer.loss_mask_used": [1, 1, 0, 1]})
            )
    return out


def strip(rep):
    return {c["call_id"]: {k: v for k, v in c.items() if k not in ("line", "byte_offset")} for c in rep["calls"]}


def test_file_equals_records_and_gzip(tmp_path, toy):
    recs = many()
    p = tmp_path / "run.jsonl"
    p.write_bytes(dumps(recs))
    g = tmp_path / "run.jsonl.gz"
    g.write_bytes(gzip.compress(dumps(recs)))
    a, b, c = audit_file(p, tokenizer=toy), audit_file(g, tokenizer=toy), audit_records(recs, tokenizer=toy)
    assert strip(a) == strip(b) == strip(c)
    assert a["coverage"] == b["coverage"]
    assert a["verdict"] == "PASS"


def test_order_independence(tmp_path, toy):
    recs = many()
    shuffled = recs[:]
    random.Random(3).shuffle(shuffled)
    assert strip(audit_records(recs, tokenizer=toy)) == strip(audit_records(shuffled, tokenizer=toy))


def test_truncated_gzip_fails_closed(tmp_path):
    data = gzip.compress(dumps(many(200)))
    p = tmp_path / "cut.jsonl.gz"
    p.write_bytes(data[: len(data) // 2])
    rep = audit_file(p)
    assert rep["verdict"] == "FAIL"
    last = rep["calls"][-1]
    assert last["primary_reason"] == "MALFORMED" and last["call_id"] is None and last["line"] > 1
    assert any("could not be read" in r for r in rep["verdict_reasons"])
    assert len(rep["calls"]) == last["line"]  # every complete record before the cut was audited
    assert rep["coverage"]["verifiable_policy_tokens"] > 0


def test_bad_input_mix(tmp_path, toy):
    oov = variant(EXAMPLE_A, trajectory_id="x", call_id="x-0", **{"response.token_ids": [20, 999, 3]})
    misaligned = variant(EXAMPLE_A, trajectory_id="y", call_id="y-0", **{"trainer.loss_mask_used": [1, 1]})
    sentinel = variant(
        EXAMPLE_A,
        trajectory_id="z",
        call_id="z-0",
        **{"rollout.logprobs": [-9999.0, -9999.0, -9999.0], "rollout.top_k": None},
    )
    p = tmp_path / "bad.jsonl"
    p.write_bytes(dumps([EXAMPLE_A, b'{"schema": "fcr/1",', b"", oov, misaligned, sentinel, b"42"]))
    rep = audit_file(p, tokenizer=toy)
    calls = rep["calls"]
    assert [c["line"] for c in calls] == [1, 2, 4, 5, 6, 7]
    got = {c["line"]: c["primary_reason"] for c in calls}
    assert got == {1: None, 2: "MALFORMED", 4: "MALFORMED", 5: "MALFORMED", 6: "SENTINEL_LOGPROB", 7: "MALFORMED"}
    # misaligned mask (2 used tokens) and the all-sentinel call (3 used tokens) both violate; OOV call (3) too
    assert rep["closed_failure_violations"] == 3 + 2 + 3
    assert rep["verdict"] == "FAIL"


@pytest.mark.parametrize("fmt", ["jsonl", "bin"])
def test_mask_export_round_trip(tmp_path, toy, fmt):
    recs = many(12)
    p = tmp_path / "run.jsonl"
    p.write_bytes(dumps(recs))
    out = tmp_path / f"masks.{fmt}"
    rep = audit_file(p, tokenizer=toy, masks_out=out, masks_format=fmt)
    masks = dict(read_masks(out))
    assert rep["loss_mask"]["export"]["calls"] == len(recs) == len(masks)
    for c in rep["calls"]:
        m = masks[c["call_id"]]
        assert len(m) == c["n_tokens"]
        expect = np.zeros(c["n_tokens"], dtype=bool)
        for s in c["spans"]:
            expect[s["start"] : s["end"]] = s["verifiable"]
        assert (m == expect).all()
        if c["role"] != "policy":
            assert not m.any()
    assert int(sum(m.sum() for m in masks.values())) == rep["coverage"]["verifiable_policy_tokens"]


def test_bin_masks_are_compact(tmp_path, toy):
    rec = variant(
        EXAMPLE_A,
        **{
            "response.token_ids": [20] * 1000,
            "response.usage_completion_tokens": 1000,
            "rollout.logprobs": [-0.1] * 1000,
            "rollout.top_k": None,
            "trainer.logprobs": [-0.1] * 1000,
            "trainer.top_k": None,
            "trainer.loss_mask_used": [1] * 1000,
        },
    )
    p = tmp_path / "r.jsonl"
    p.write_bytes(dumps([rec]))
    audit_file(p, masks_out=tmp_path / "m.bin", masks_format="bin")
    assert (tmp_path / "m.bin").stat().st_size == 8 + 2 + 4 + 4 + 125
    ((cid, m),) = read_masks(tmp_path / "m.bin")
    assert cid == "tA-0" and m.all() and len(m) == 1000


def test_max_calls_in_report(toy):
    rep = audit_records(many(20), tokenizer=toy, max_calls_in_report=5)
    assert len(rep["calls"]) == 5 and rep["calls_truncated"]
    assert rep["coverage"]["calls"]["total"] > 5


def test_report_is_json_serialisable(toy):
    rep = audit_records(many(5) + [b"oops"], tokenizer=toy)
    json.dumps(rep)


def _cli(capsys, *args):
    from workers.fidelity.cli import main

    code = main([str(a) for a in args])
    out = capsys.readouterr().out
    return code, out


def test_cli_audit_and_import(tmp_path, capsys):
    vocab = tmp_path / "vocab.json"
    vocab.write_text(TOY_VOCAB_JSON)
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_bytes(dumps([EXAMPLE_A, EXAMPLE_C]))
    bad.write_bytes(dumps([EXAMPLE_A, EXAMPLE_D]))
    code, out = _cli(capsys, "audit", good, "--toy-vocab", vocab, "--json")
    assert code == 0
    rep = json.loads(out)
    assert rep["verdict"] == "PASS" and rep["calls"][0]["drift_if_retokenized"] is False
    code, out = _cli(
        capsys, "audit", bad, "--mode", "merged", "--masks-out", tmp_path / "m.bin", "--masks-format", "bin"
    )
    assert code == 1 and "FAIL" in out and "closed-failure violations: 1" in out
    assert dict(read_masks(tmp_path / "m.bin"))["tD-0"].tolist() == [True, True, False, True]
    ex = tmp_path / "ex.jsonl"
    ex.write_bytes(
        dumps(
            [
                {
                    "request": {"messages": [{"role": "user", "content": "List files"}]},
                    "response": {
                        "id": "c1",
                        "prompt_token_ids": [1, 44, 45, 3, 2],
                        "choices": [{"index": 0, "token_ids": [20, 3], "message": {"content": "ls"}}],
                    },
                }
            ]
        )
    )
    code, out = _cli(capsys, "import", "vllm", ex, tmp_path / "out.jsonl", "--json")
    assert code == 0 and json.loads(out)["records"] == 1
    rec = orjson.loads((tmp_path / "out.jsonl").read_bytes())
    assert rec["response"]["token_ids"] == [20, 3] and rec["rollout"]["logprobs"] == [None, None]
    code, _ = _cli(capsys, "import", "agl", ex, tmp_path / "out2.jsonl", "--step", "3")
    assert code == 0


def test_cli_module_entry_point(tmp_path):
    """``python -m workers.fidelity`` exits 2 on a missing file (and never needs torch for that)."""
    r = subprocess.run(
        [sys.executable, "-m", "workers.fidelity", "audit", str(tmp_path / "missing.jsonl")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "error" in r.stderr


def test_ids_beyond_int64_fail_closed_per_record():
    huge = variant(EXAMPLE_A, trajectory_id="h", call_id="h-0", **{"response.token_ids": [20, 2**70, 3]})
    rep = audit_records([huge, EXAMPLE_A])
    c = by_id(rep)
    assert c["h-0"]["primary_reason"] == "MALFORMED" and "cannot be audited" in c["h-0"]["malformed"][0]["reason"]
    assert c["tA-0"]["verdict"] == "verifiable"
    assert rep["closed_failure_violations"] == 3  # its mask still counts against the run


def test_progress_callback(tmp_path):
    p = tmp_path / "run.jsonl"
    p.write_bytes(dumps(many(40)))
    seen = []
    audit_file(p, certificates=False, progress=lambda f, m: seen.append((f, m)), progress_every=10)
    fr = [f for f, _ in seen]
    assert fr[-1] == 1.0 and any(0.3 < f < 1.0 for f in fr)
    assert all(a <= b for a, b in zip(fr, fr[1:]))
