"""certify_file on fcr/1 files: Example A (docs/fcr.md#example-a-a-fully-verifiable-policy-call), agreement with the
position-level API, chunking and gzip invariance, per-step and length-bucket aggregates, JSON safety, sink and
progress callbacks."""

import gzip
import json
import math

import numpy as np
import orjson
import pytest

from certify_helpers import random_pair, topk_view
from workers.certify import trm_bounds
from workers.certify.file import certify_file
from workers.certify.intervals import tv_interval

EXAMPLE_A = {
    "schema": "fcr/1",
    "run_id": "run-toy",
    "step": 7,
    "trajectory_id": "tA",
    "call_id": "tA-0",
    "call_index": 0,
    "role": "policy",
    "role_source": "header",
    "response": {"token_ids": [20, 21, 3], "provenance": "engine"},
    "rollout": {
        "logprobs": [-0.105361, -0.510826, -0.01005],
        "top_k": [
            [[20, -0.105361], [24, -2.995732]],
            [[21, -0.510826], [24, -1.203973]],
            [[3, -0.01005], [22, -5.298317]],
        ],
    },
    "trainer": {
        "logprobs": [-0.127833, -0.693147, -0.01005],
        "top_k": [
            [[20, -0.127833], [24, -2.813411]],
            [[21, -0.693147], [24, -0.916291]],
            [[3, -0.01005], [22, -5.115996]],
        ],
    },
}
BACKGROUND = {
    "schema": "fcr/1",
    "trajectory_id": "tA",
    "call_id": "tA-bg-1",
    "role": "background",
    "response": {"token_ids": [35, 3]},
    "rollout": {"logprobs": [-1.2, -0.05]},
}


def write(path, records, gz=False):
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_example_a_token_statuses_and_background_skip(tmp_path):
    sink = []
    cert = certify_file(
        write(tmp_path / "a.jsonl", [EXAMPLE_A, BACKGROUND]),
        threshold=0.15,
        precision="exact",
        sequence_sink=sink.extend,
    )
    s = cert["summary"]
    # Example A (docs/fcr.md): L = [0.02, 0.10, 0.001], U = [0.07, 0.20, 0.005] ⇒ inside, undecided, inside at δ = 0.15
    assert s["status_counts"]["tokens"] == {"IN": 2, "OUT": 0, "UNDETERMINED": 1, "DATA_ERROR": 0}
    assert s["eps_hat"] == pytest.approx(0.20, abs=2e-6) and s["tv_lo_max"] == pytest.approx(0.10, abs=2e-6)
    assert s["skipped"] == {"role background": 1} and s["records"] == 2
    assert len(sink) == 1 and sink[0]["status"] == "UNDETERMINED" and sink[0]["accept"] is False
    assert sink[0]["delta_hat"] is None  # KL unbounded from top-K lists
    assert any("KL unbounded" in c for c in cert["caveats"])
    assert any("visited contexts" in c for c in cert["caveats"])
    assert cert["steps"][0]["step"] == 7 and cert["steps"][0]["acceptance_rate"] == 0.0
    # with a looser threshold the sequence is certified inside
    cert2 = certify_file(tmp_path / "a.jsonl", threshold=0.25)
    assert cert2["summary"]["status_counts"]["sequences"]["CERT_IN"] == 1


def random_records(rng, n, with_topk=True):
    recs, truth = [], []
    for i in range(n):
        T = int(rng.integers(1, 40))
        ids, a, b, ptop, qtop = [], [], [], [], []
        seq_hi = []
        for _ in range(T):
            N = 30
            p, q = random_pair(rng, N, mix=rng.uniform(0, 0.2))
            y = int(rng.choice(N, p=p))
            K = int(rng.integers(0, 6)) if with_topk else 0
            pi, pl = topk_view(p, K)
            qi, ql = topk_view(q, K)
            ids.append(y)
            a.append(math.log(p[y]))
            b.append(math.log(q[y]))
            ptop.append([[i_, l_] for i_, l_ in zip(pi, pl)])
            qtop.append([[i_, l_] for i_, l_ in zip(qi, ql)])
            # fcr/1 trainer lists are arbitrary subsets (docs/fcr.md#rollout-and-trainer): certify_file caps the engine side only
            seq_hi.append(tv_interval(pi, pl, qi, ql, y, a[-1], b[-1], topk_caps=(True, False)))
        r = {
            "step": i % 3,
            "call_id": f"c{i}",
            "trajectory_id": f"t{i}",
            "role": "policy",
            "response": {"token_ids": ids},
            "rollout": {"logprobs": a},
            "trainer": {"logprobs": b},
        }
        if with_topk:
            r["rollout"]["top_k"], r["trainer"]["top_k"] = ptop, qtop
        recs.append(r)
        truth.append(seq_hi)
    return recs, truth


def test_matches_position_api_and_is_chunk_and_gzip_invariant(tmp_path):
    rng = np.random.default_rng(7)
    recs, truth = random_records(rng, 25)
    path = write(tmp_path / "r.jsonl", recs)
    runs = []
    for kw in ({"chunk_tokens": 1}, {"chunk_tokens": 37}, {"chunk_tokens": 1 << 20}):
        sink = []
        cert = certify_file(path, precision="exact", threshold=0.2, sequence_sink=sink.extend, **kw)
        runs.append((cert, sink))
    cert_gz, _ = certify_file(write(tmp_path / "r.jsonl.gz", recs, gz=True), precision="exact", threshold=0.2), None
    for cert, sink in runs:
        assert [d["call_id"] for d in sink] == [r["call_id"] for r in recs]
        for d, seq in zip(sink, truth):
            assert d["eps_hat"] == pytest.approx(max(h for _, h in seq), abs=1e-12)
            assert d["tv_lo_max"] == pytest.approx(max(lo for lo, _ in seq), abs=1e-12)
            want = (
                "CERT_IN"
                if max(h for _, h in seq) <= 0.2
                else ("CERT_OUT" if max(lo for lo, _ in seq) > 0.2 else "UNDETERMINED")
            )
            assert d["status"] == want and d["accept"] == (want == "CERT_IN")
        for key in ("eps_hat", "tv_seq_mean", "mean_A_y", "acceptance_rate", "tokens", "T_ref"):
            assert cert["summary"][key] == pytest.approx(runs[0][0]["summary"][key], rel=1e-12)
            assert cert_gz["summary"][key] == pytest.approx(runs[0][0]["summary"][key], rel=1e-12)
        assert cert["steps"] == runs[0][0]["steps"] and cert["length_buckets"] == runs[0][0]["length_buckets"]


def test_run_bounds_are_trm_bounds_at_measured_plugins(tmp_path):
    rng = np.random.default_rng(3)
    recs, truth = random_records(rng, 12)
    cert = certify_file(write(tmp_path / "r.jsonl", recs), precision="exact", budget=0.5, threshold=0.3)
    T_ref = max(len(s) for s in truth)
    eps = max(h for s in truth for _, h in s)
    prof = np.zeros(T_ref)
    for s in truth:
        prof[: len(s)] += [h for _, h in s]
    prof /= len(truth)
    tv_seq = np.mean([min(1.0, sum(h for _, h in s)) for s in truth])
    want = trm_bounds(T_ref, eps=eps, tv_seq=tv_seq, tv_profile=prof)
    assert cert["summary"]["T_ref"] == T_ref and cert["summary"]["delta_hat"] is None
    for k, v in want.items():
        assert cert["bounds"][k] == (v if k == "argmin" else pytest.approx(v, rel=1e-10)), k
    assert cert["summary"]["mean_A_y"] == pytest.approx(want["adap_tv"], rel=1e-10)
    b = cert["budget"]
    assert b["budget"] == 0.5 and b["within_budget"] == (want["best"] <= 0.5)
    assert set(b["thresholds"]) >= {"classical_tv", "pm_kl", "linear"}
    json.dumps(cert, allow_nan=False)


def test_steps_buckets_and_callbacks(tmp_path):
    rng = np.random.default_rng(11)
    recs, truth = random_records(rng, 30, with_topk=False)
    calls = []
    cert = certify_file(write(tmp_path / "r.jsonl", recs), chunk_tokens=50, progress=lambda f, m: calls.append((f, m)))
    steps = {s["step"]: s for s in cert["steps"]}
    for st in (0, 1, 2):
        mine = [r for r in recs if r["step"] == st]
        assert steps[st]["sequences"] == len(mine)
        assert steps[st]["tokens"] == sum(len(r["response"]["token_ids"]) for r in mine)
        k3 = [
            math.exp(bb - aa) - 1 - (bb - aa)
            for r in mine
            for aa, bb in zip(r["rollout"]["logprobs"], r["trainer"]["logprobs"])
        ]
        assert steps[st]["mean_k3"] == pytest.approx(np.mean(k3), rel=1e-9)
    assert sum(b["sequences"] for b in cert["length_buckets"]) == 30
    assert len(calls) >= 3 and calls[-1][0] == 1.0
    assert all(f is None or 0 <= f <= 1 for f, _ in calls)
    assert any("No top-K lists" in c for c in cert["caveats"])


def test_budget_derives_threshold_and_heuristic_modes(tmp_path):
    rng = np.random.default_rng(5)
    recs, _ = random_records(rng, 8)
    path = write(tmp_path / "r.jsonl", recs)
    cert = certify_file(path, budget=0.1)
    assert cert["summary"]["threshold_source"].startswith("budget")
    assert 0 < cert["summary"]["threshold"] < 0.1
    h = certify_file(path, mode="k2max", threshold=0.05)
    assert h["summary"]["status_counts"]["sequences"]["HEURISTIC"] == 8
    assert any("heuristic" in c.lower() for c in h["caveats"])
