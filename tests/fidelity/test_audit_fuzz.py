"""The audit never raises on hostile input, and its closed-failure invariant holds on whatever it accepts."""

from __future__ import annotations

import copy

import orjson
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from workers.fidelity import audit_records

from .conftest import EXAMPLE_A, EXAMPLE_C, EXAMPLE_D

scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=4)
values = st.recursive(
    scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c, max_size=3), max_leaves=10
)
PATHS = [
    ("role",),
    ("role_source",),
    ("purpose",),
    ("call_index",),
    ("trajectory_id",),
    ("call_id",),
    ("prompt", "token_ids"),
    ("prompt", "provenance"),
    ("prompt", "task_prompt_sha256_observed"),
    ("prompt", "context_event"),
    ("prompt", "context_source_call_id"),
    ("response", "token_ids"),
    ("response", "provenance"),
    ("response", "text"),
    ("response", "usage_completion_tokens"),
    ("response", "token_strings"),
    ("rollout", "logprobs"),
    ("rollout", "top_k"),
    ("rollout", "token_policy_versions"),
    ("trainer", "logprobs"),
    ("trainer", "top_k"),
    ("trainer", "loss_mask_used"),
    ("trainer", "sample_id"),
    ("trainer", "policy_version"),
    ("engine", "logprobs_mode"),
    ("sampling",),
    ("model", "policy_version"),
    ("rollout", "logprobs", 1),
    ("trainer", "top_k", 0, 0, 1),
    ("rollout", "top_k", 2),
]
BASES = [EXAMPLE_A, EXAMPLE_C, EXAMPLE_D]


def mutate(base, path, value):
    r = copy.deepcopy(base)
    d = r
    for k in path[:-1]:
        if isinstance(d, dict):
            d = d.setdefault(k, {})
        elif isinstance(d, list) and isinstance(k, int) and k < len(d):
            d = d[k]
        else:
            return r
    k = path[-1]
    if isinstance(d, dict) or (isinstance(d, list) and isinstance(k, int) and k < len(d)):
        d[k] = value
    return r


@hsettings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(range(len(BASES))), st.sampled_from(PATHS), values), min_size=1, max_size=4),
    st.sampled_from(["transition", "merged"]),
)
def test_audit_never_raises(muts, mode):
    recs = [mutate(BASES[b], p, v) for b, p, v in muts] + [EXAMPLE_A]
    rep = audit_records(recs, mode=mode, certificates=False)
    orjson.dumps(rep, option=orjson.OPT_SERIALIZE_NUMPY)
    assert len(rep["calls"]) == len(recs)
    for c in rep["calls"]:
        assert c["verdict"] in ("verifiable", "partial", "excluded")
        assert (c["verdict"] == "verifiable") == (c["reasons"] == [])
        assert sum(s["end"] - s["start"] for s in c["spans"]) == c["n_tokens"]
        assert sum(s["end"] - s["start"] for s in c["spans"] if s["verifiable"]) == c["verifiable_tokens"]
        if c["role"] != "policy":
            assert c["verifiable_tokens"] == 0
    assert (rep["verdict"] == "PASS") == (not rep["verdict_reasons"])


@hsettings(max_examples=80, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=5))
def test_audit_random_lines(lines):
    rep = audit_records(lines + [orjson.dumps(EXAMPLE_A)], certificates=False)
    assert rep["calls"][-1]["verdict"] == "verifiable" or rep["calls"][-1]["primary_reason"] == "MALFORMED"
