"""audit_file streaming: the call sink, byte progress, one-parse evaluation with R5/R9 applied after the index is
complete (out-of-order files re-read only what changed), and bounded memory with a sink."""

from __future__ import annotations

import random
import tracemalloc

import orjson
import pytest

from workers.fidelity import audit_file, audit_records
from workers.fidelity.synth import synth_record

from .conftest import EXAMPLE_A, EXAMPLE_C, EXAMPLE_D
from .helpers import variant


def chained_run(trajectories=6, calls=4, seed=0, k=3):
    """Multi-call trajectories whose prompts extend the previous call (TITO, R5/R9: docs/fidelity-rules.md), merged samples per
    trajectory, with a few deliberate breaks: a non-extending prompt, a declared compaction, a background call."""
    rng = random.Random(seed)
    out = []
    for t in range(trajectories):
        seq = None
        for c in range(calls):
            r = synth_record(rng, call=c, traj=f"t{t}", prompt_len=12, resp_len=rng.choice([3, 9, 17]), k=k, step=t)
            if seq is not None:
                r["prompt"]["token_ids"] = seq + [7, 8]
            if c == 0:
                r["prompt"]["task_prompt_sha256_declared"] = r["prompt"]["task_prompt_sha256_observed"] = "ab" * 32
            if t % 3 == 1 and c == 2:  # breaks the root prefix and the merge chain
                r["prompt"]["token_ids"] = [1, 2, 3] + r["prompt"]["token_ids"]
            if t % 3 == 2 and c == 3:  # declared history rewrite with a source in the log
                r["prompt"]["token_ids"] = [9, 9]
                r["prompt"]["context_event"] = "compaction"
                r["prompt"]["context_source_call_id"] = f"t{t}-0"
            r["trainer"]["sample_id"] = f"s{t}"
            seq = r["prompt"]["token_ids"] + r["response"]["token_ids"]
            out.append(r)
        out.append(variant(EXAMPLE_C, run_id="run-synth", trajectory_id=f"t{t}", call_id=f"t{t}-bg", call_index=9))
    return out


def write(path, recs):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return path


def keyed(calls):
    return {c["call_id"]: {k: v for k, v in c.items() if k not in ("line", "byte_offset")} for c in calls}


def test_sink_gets_every_call_in_batches_and_matches_the_report(tmp_path):
    p = write(tmp_path / "run.jsonl", chained_run())
    plain = audit_file(p, mode="merged")
    batches = []
    streamed = audit_file(p, mode="merged", call_sink=batches.append, sink_batch=7)
    assert len(batches) >= 4 and all(len(b) == 7 for b in batches[:-1])
    entries = [e for b in batches for e in b]
    assert entries == plain["calls"]  # same entries, same file order, byte offsets included
    assert streamed["calls"] == [] and streamed["calls_truncated"]  # a sink means nothing is held
    assert streamed["coverage"] == plain["coverage"] and streamed["verdict"] == plain["verdict"]
    assert [e["line"] for e in entries] == sorted(e["line"] for e in entries)
    data = p.read_bytes()
    for e in entries:  # byte_offset points at the call's own line
        assert orjson.loads(data[e["byte_offset"] : data.index(b"\n", e["byte_offset"])])["call_id"] == e["call_id"]


@pytest.mark.parametrize("require_certificate", [False, True])
def test_sink_with_certificates_equals_the_plain_report(tmp_path, require_certificate):
    p = write(tmp_path / "run.jsonl", chained_run(trajectories=4))
    plain = audit_file(p, mode="merged", require_certificate=require_certificate)
    batches = []
    streamed = audit_file(
        p,
        mode="merged",
        require_certificate=require_certificate,
        call_sink=batches.append,
        sink_batch=5,
        max_calls_in_report=3,
    )
    assert [e for b in batches for e in b] == plain["calls"]
    assert streamed["calls"] == plain["calls"][:3]
    assert streamed["coverage"] == plain["coverage"]
    cert = plain["coverage"]["certificates"]
    if not require_certificate:  # certificates cover exactly the verifiable policy tokens (R5/R9 applied first)
        assert cert["verifiable_tokens"] == plain["coverage"]["verifiable_policy_tokens"] > 0
    else:  # invalid inputs (listed mass > 1 in the synthetic top-K) then exclude positions: CERT_INPUT_INVALID
        assert cert["decisions"]["invalid"] > 0
        assert (
            plain["coverage"]["excluded_policy_tokens_by_any_reason"]["CERT_INPUT_INVALID"]
            == cert["decisions"]["invalid"]
        )


def same_numbers(a, b, path=""):
    """Equal up to float summation order; lists that name lines (which differ between orders) are skipped."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            if k not in ("violations", "chain_break_sites"):
                same_numbers(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-9), path
    else:
        assert a == b, path


def test_context_rules_do_not_depend_on_file_order(tmp_path):
    recs = chained_run(trajectories=9)
    base = audit_file(write(tmp_path / "in-order.jsonl", recs), mode="merged")
    lineages = {c["lineage"] for c in base["calls"]}
    assert {"root-ok", "prefix-ok", "unverified", "context-compaction-ok"} <= lineages
    assert base["coverage"]["samples"]["chain_breaks"] == 6  # t1, t4, t7 (inserted prefix), t2, t5, t8 (compaction)
    assert base["coverage"]["drift"]["tito_chain_breaks"] == 6
    for order in ("reversed", "shuffled"):
        recs2 = recs[::-1] if order == "reversed" else random.Random(4).sample(recs, len(recs))
        other = audit_file(write(tmp_path / f"{order}.jsonl", recs2), mode="merged")
        assert keyed(other["calls"]) == keyed(base["calls"]), order
        same_numbers(other["coverage"], base["coverage"])


def test_progress_is_the_fraction_of_bytes_read(tmp_path):
    recs = [variant(EXAMPLE_A, trajectory_id=f"t{i}", call_id=f"t{i}-0") for i in range(30)]
    recs += [variant(EXAMPLE_D, trajectory_id=f"d{i}", call_id=f"d{i}-0") for i in range(30)]  # longer lines
    p = write(tmp_path / "run.jsonl", recs)
    data = p.read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]  # byte position after each line
    seen = []
    audit_file(
        p, certificates=False, progress=lambda f, m: seen.append((f, m)), call_sink=lambda e: None, sink_batch=10
    )
    fractions = [f for f, _ in seen]
    assert fractions[-1] == 1.0 and all(a <= b for a, b in zip(fractions, fractions[1:]))
    reading = [(f, m) for f, m in seen if "of the file read" in m]
    assert len(reading) >= 20
    for f, m in reading:
        line = int(m.rsplit("line ", 1)[1].rstrip(")"))
        assert f == pytest.approx(0.9 * ends[line - 1] / len(data))
    assert sum("stored" in m for _, m in seen) == len(recs) // 10  # one per sink batch
    assert all(0.9 <= f <= 1.0 for f, m in seen if "stored" in m)


def test_a_sink_keeps_memory_independent_of_the_number_of_calls(monkeypatch):
    """With a sink the audit does not hold the call entries: what it still holds when it finishes grows with the
    number of calls only by the index (a few small tuples per call), far less than the entries themselves. (The exact
    quantile values, bounded by ``EXACT_LIMIT`` per distribution, are made small so that 800 calls exceed them.)"""
    from workers.fidelity import coverage

    monkeypatch.setattr(coverage, "EXACT_LIMIT", 1000)
    monkeypatch.setattr(coverage.Distribution, "BATCH", 1024)
    rng = random.Random(2)
    recs = [orjson.dumps(synth_record(rng, call=0, traj=f"t{i}", prompt_len=8, resp_len=64, k=2)) for i in range(800)]
    audit_records(recs[:2])  # imports (torch, for the certificates) are not what is measured

    def held_at_the_end(n, **kw):
        held = []

        def progress(fraction, message):
            if message == "done":  # the audit's own state, just before the report is assembled
                held.append(tracemalloc.get_traced_memory()[0])

        tracemalloc.start()
        try:
            rep = audit_records(recs[:n], progress=progress, **kw)
        finally:
            tracemalloc.stop()
        return held[0], rep

    (kept_small, _), (kept_big, rep_kept) = held_at_the_end(200), held_at_the_end(800)
    sink = lambda entries: None
    (streamed_small, _), (streamed_big, rep_streamed) = (
        held_at_the_end(200, call_sink=sink),
        held_at_the_end(800, call_sink=sink),
    )
    assert len(rep_kept["calls"]) == 800 and rep_streamed["calls"] == []
    per_call_kept = (kept_big - kept_small) / 600
    per_call_streamed = (streamed_big - streamed_small) / 600
    # the measurement sees whole entries: as Python objects an entry (per-position certificate lists, 64 tokens) takes
    # several times its JSON text (measured 5.7-6.2x); a floor from the entries themselves, not an allocator constant
    entry_json = sum(len(orjson.dumps(c)) for c in rep_kept["calls"]) / len(rep_kept["calls"])
    assert per_call_kept > 3 * entry_json, (per_call_kept, entry_json)
    assert per_call_streamed < per_call_kept / 4, (per_call_streamed, per_call_kept)
