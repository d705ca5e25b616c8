"""Partial certificates merge to the one-pass certificate (workers/certify/partial.py, issue #18 part 1).

A file cut into pieces at random places (byte ranges at line starts, or Parquet row groups), each piece certified
with its own internal chunk size, the partials sent through JSON and merged in a random order and grouping: the
summarised certificate must equal ``certify_file``'s, byte for byte as JSON, and the sequence rows must be the same
rows. The file mixes everything a partial accumulates: several steps, DATA_ERROR records of each kind, background
calls, an empty response, a trainer list that misses rollout ids, sampled-only records (δ̂ unbounded) and top-K ones.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from workers.certify.exact import ExactSums
from workers.certify.file import certify_file, certify_part, plan_certificate, summarise
from workers.certify.partial import Partial
from workers.fcr.chunks import chunk_ranges
from workers.fcr.parquet_write import jsonl_to_parquet
from workers.fcr.synth import SynthConfig, iter_run

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _records():
    recs = list(iter_run(SynthConfig(trajectories=14, response_len=(3, 40), steps=4, spike_rate=0.05, seed=3)))
    bad = [
        b"{not json",
        b"[1, 2]",
        {
            "role": "policy",
            "call_id": "no-trainer",
            "step": 1,
            "response": {"token_ids": [1, 2]},
            "rollout": {"logprobs": [-0.1, -0.2]},
        },
        {
            "role": "policy",
            "call_id": "empty",
            "step": 2,
            "response": {"token_ids": []},
            "rollout": {"logprobs": []},
            "trainer": {"logprobs": []},
        },
        {
            "role": "policy",
            "call_id": "sampled-only",
            "step": 3,
            "response": {"token_ids": [4, 5, 6]},
            "rollout": {"logprobs": [-0.1, -2.0, -0.01]},
            "trainer": {"logprobs": [-0.12, -1.5, -0.011]},
        },
        {
            "role": "policy",
            "call_id": "positive",
            "step": 0,
            "response": {"token_ids": [4]},
            "rollout": {"logprobs": [0.5]},
            "trainer": {"logprobs": [-0.1]},
        },
        {
            "role": "policy",
            "call_id": "uncovered",
            "step": 2,
            "response": {"token_ids": [7, 8]},
            "rollout": {"logprobs": [-0.1, -0.3], "top_k": [[[7, -0.1], [9, -2.5]], [[8, -0.3], [9, -1.5]]]},
            "trainer": {"logprobs": [-0.11, -0.31], "top_k": [[[7, -0.11]], [[8, -0.31]]]},
        },
        {"role": "background", "call_id": "bg", "response": {"token_ids": [1]}, "rollout": {"logprobs": [-0.2]}},
    ]
    out = []
    for i, r in enumerate(recs):  # spread the odd records through the file so that cuts separate them
        out.append(r)
        if i % 6 == 2 and bad:
            out.append(bad.pop(0))
            out.append(b"")  # a blank line counts as a line (line numbers must agree)
    return out + bad


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("partial")
    jsonl = d / "run.jsonl"
    jsonl.write_bytes(b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in _records()))
    good = d / "good.jsonl"  # Parquet holds valid fcr/1 records only: the generated ones, in small row groups
    cfg = SynthConfig(trajectories=14, response_len=(3, 40), steps=4, spike_rate=0.05, seed=4)
    good.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in iter_run(cfg)))
    parquet = d / "run.parquet"
    jsonl_to_parquet(good, parquet, row_group_tokens=60)
    return {"jsonl": jsonl, "parquet": parquet}


OPTIONS = st.sampled_from(
    [  # max_errors below the file's 4 DATA_ERRORs: which errors are kept must not depend on cuts
        {"max_errors": 2},
        {"budget": 0.5},
        {"threshold": 0.05, "mode": "tv", "max_errors": 2},
        {"mode": "kl", "precision": "bf16", "max_errors": 3},
        {"mode": "k3mean", "max_errors": 1},
        {"budget": 2.0, "mode": "kl", "constants": "tight", "caps": False, "max_errors": 2},
    ]
)


def _merge_randomly(parts, rnd):
    """Merge in a random order and a random grouping (a random binary tree), each partial through JSON first."""
    parts = [Partial.from_json(orjson.loads(orjson.dumps(p.to_json()))) for p in parts]
    rnd.shuffle(parts)
    while len(parts) > 1:
        i = rnd.randrange(len(parts) - 1)
        parts[i : i + 2] = [parts[i].merge(parts[i + 1])]
    return parts[0]


@SETTINGS
@example(kind="jsonl", target=1, options={"threshold": 0.05, "max_errors": 2}, one_pass_tokens=7, seed=1)
@example(kind="parquet", target=1, options={"budget": 0.5}, one_pass_tokens=50, seed=2)
@given(
    kind=st.sampled_from(["jsonl", "parquet"]),
    target=st.integers(1, 6000),
    options=OPTIONS,
    one_pass_tokens=st.integers(1, 400),
    seed=st.integers(0, 10**6),
)
def test_merged_partials_equal_one_pass(run_files, kind, target, options, one_pass_tokens, seed):
    path = run_files[kind]
    rnd = random.Random(seed)
    one_rows: list = []
    one = certify_file(path, chunk_tokens=one_pass_tokens, sequence_sink=one_rows.extend, **options)
    plan = plan_certificate(path, **options)
    chunks = chunk_ranges(path, target)
    rows: list = []
    parts = [certify_part(path, plan, c, chunk_tokens=rnd.randint(1, 300), sequence_sink=rows.extend) for c in chunks]
    merged = summarise(_merge_randomly(parts, rnd), plan)
    assert orjson.dumps(merged) == orjson.dumps(one)
    key = lambda r: r["line"]
    assert orjson.dumps(sorted(rows, key=key)) == orjson.dumps(sorted(one_rows, key=key))
    assert merged["summary"]["sequences"] > 10 and merged["steps"]  # the file really exercises the aggregates


def test_cut_into_pieces_really_cuts(run_files):
    """The property above is not vacuous: small targets give many pieces of each kind."""
    assert len(chunk_ranges(run_files["jsonl"], 2000)) > 5
    assert len(chunk_ranges(run_files["parquet"], 1)) > 3


def test_sums_are_exact_where_float_order_would_differ(run_files):
    """The run's Σ ε̂ is the correctly rounded exact sum of the per-sequence ε̂ (rows from the sink), which a float
    running sum in another order would not always hit."""
    rows: list = []
    cert = certify_file(run_files["jsonl"], sequence_sink=rows.extend)
    eps = [r["eps_hat"] for r in rows if r["status"] != "DATA_ERROR"]
    exact = float(sum(Fraction(e) for e in eps))
    assert cert["summary"]["eps_hat_mean"] == exact / len(eps)


# ---- the exact-sum helper ---------------------------------------------------------------------------------------
FLOATS = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True, width=64)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(FLOATS, max_size=60), cuts=st.lists(st.integers(0, 60), max_size=5), seed=st.integers(0, 99))
def test_exact_sums_equal_the_rational_sum_in_any_grouping(values, cuts, seed):
    exact = sum((Fraction(v) for v in values), Fraction(0))
    try:
        want = float(exact)
    except OverflowError:
        want = np.inf if exact > 0 else -np.inf
    pieces, prev = [], 0
    for c in sorted(set(min(c, len(values)) for c in cuts)) + [len(values)]:
        e = ExactSums(2)
        e.add(1, values[prev:c])
        pieces.append(ExactSums.from_json(orjson.loads(orjson.dumps(e.to_json()))))
        prev = c
    random.Random(seed).shuffle(pieces)
    total = ExactSums()
    for p in pieces:
        total.merge(p)
    assert total.values()[1] == want
    assert total.values()[0] == 0.0
    whole = ExactSums(2)
    whole.add(1, values)
    assert whole.to_json() == total.to_json()  # one canonical form, whatever the grouping


def test_exact_sums_non_finite_terms():
    e = ExactSums()
    e.add([0, 0, 1, 2, 2, 3], [np.inf, 1.0, -np.inf, np.inf, -np.inf, np.nan])
    got = e.values()
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2]) and np.isnan(got[3])
    back = ExactSums.from_json(orjson.loads(orjson.dumps(e.to_json())))
    assert np.array_equal(back.values(), got, equal_nan=True)


def test_exact_sums_survive_many_large_terms():
    """Window carries: 2**20 terms of the largest float64 magnitude, and cancellation back to a tiny remainder."""
    big = np.full(1 << 20, 2.0**1000)
    e = ExactSums()
    e.add(0, big)
    e.add(0, [5e-324])
    e.add(0, -big)
    assert e.values()[0] == 5e-324


@settings(max_examples=100, deadline=None)
@given(values=st.lists(FLOATS, min_size=1, max_size=40), slots=st.integers(1, 5), big=st.integers(0, 1 << 12))
def test_exact_sums_json_round_trip_keeps_the_exact_integers(values, slots, big):
    """from_json rebuilds each sum's exact integer (not only its rounded value): sums from the smallest subnormal to
    past the top window's 32 bits (``big`` copies of 2**1020 carried into window 67)."""
    e = ExactSums()
    e.add(np.arange(len(values)) % slots, values)
    e.add(0, np.full(big, 2.0**1020))
    e._carry()
    back = ExactSums.from_json(orjson.loads(orjson.dumps(e.to_json())))
    assert back.integers() == e.integers()
    assert back.to_json() == e.to_json()
    assert np.array_equal(back.values(), e.values())
