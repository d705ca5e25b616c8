"""Property tests: the validator never raises, and its C fast paths agree with the exact path."""

from __future__ import annotations

import copy
import gzip

import orjson
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from workers.fcr import validate_file, validate_record
from workers.fcr.validate import array_bools_possible

from .conftest import EXAMPLE_A

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
json_values = st.recursive(
    json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c, max_size=4), max_leaves=12
)

PATHS = []


def _collect(d, prefix=()):
    for k, v in d.items():
        PATHS.append(prefix + (k,))
        if isinstance(v, dict):
            _collect(v, prefix + (k,))


_collect(EXAMPLE_A)
PATHS += [
    ("rollout", "top_k", 1),
    ("rollout", "top_k", 1, 0),
    ("rollout", "top_k", 1, 0, 0),
    ("trainer", "top_k", 2, 1, 1),
    ("response", "token_ids", 2),
    ("prompt", "token_ids", 0),
    ("trainer", "loss_mask_used", 0),
    ("rollout", "logprobs", 1),
]

FUZZ = hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(json_values)
def test_any_json_value_never_crashes(v):
    for fast in (False, True):
        issues = validate_record(v, line=1, no_array_bools=fast)
        assert all(i.severity in ("error", "warning") for i in issues)
        if not isinstance(v, dict):
            assert issues and issues[0].severity == "error"


@FUZZ
@given(st.sampled_from(PATHS), json_values)
def test_mutated_record_fast_path_agrees(path, value):
    rec = copy.deepcopy(EXAMPLE_A)
    d = rec
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    exact = [(i.field, i.severity) for i in validate_record(rec, lint=True)]
    try:
        line = orjson.dumps(rec)
    except TypeError:  # ints beyond 64 bits: orjson.loads never yields them either
        line = None
    if line is not None and not array_bools_possible(line):
        fast = [(i.field, i.severity) for i in validate_record(rec, lint=True, no_array_bools=True)]
        assert fast == exact
    # a value that changes the type of a required scalar must be caught
    if path == ("step",) and type(value) is not int:
        assert ("step", "error") in exact


@FUZZ
@given(st.binary(max_size=400), st.booleans())
def test_random_bytes_file_never_crashes(tmp_path_factory, data, gz):
    p = tmp_path_factory.mktemp("fz") / "f.jsonl"
    p.write_bytes(gzip.compress(data)[: max(3, len(data))] if gz else data)
    out = validate_file(p)
    assert isinstance(out["valid"], bool)
    assert out["error_count"] >= len(out["errors"])
    orjson.dumps(out)  # JSON-serialisable report


@FUZZ
@given(
    st.lists(st.sampled_from([b"{", b"[]", b"", b"null", orjson.dumps(EXAMPLE_A), b'{"schema":"fcr/1"}']), max_size=8)
)
def test_line_mix_counts(tmp_path_factory, lines):
    p = tmp_path_factory.mktemp("mix") / "f.jsonl"
    p.write_bytes(b"\n".join(lines))
    out = validate_file(p)
    good = sum(1 for x in lines if x == orjson.dumps(EXAMPLE_A))
    nonblank = sum(1 for x in lines if x.strip())
    assert out["records"] == nonblank
    assert out["valid_records"] == good
    assert out["valid"] == (good == nonblank and nonblank > 0)


@FUZZ
@given(st.sampled_from(PATHS), json_values)
def test_fast_accept_path_is_sound(path, value):
    """``_fast_valid`` may only accept records the detailed path finds nothing wrong with."""
    from workers.fcr.record_check import _fast_valid

    rec = copy.deepcopy(EXAMPLE_A)
    d = rec
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    detailed = [
        i
        for i in validate_record(rec, lint=True)  # lint=True forces the detailed path
        if not ("sentinel" in i.reason or "positive" in i.reason)
    ]
    try:
        bools_ok = not array_bools_possible(orjson.dumps(rec))
    except TypeError:
        bools_ok = False
    for fast in (False, True) if bools_ok else (False,):  # fast=True is only used on bool-free lines
        if _fast_valid(copy.deepcopy(rec), fast):
            assert detailed == [], (fast, detailed)


def test_fast_accept_path_accepts_the_good_record():
    from workers.fcr.record_check import _fast_valid

    assert _fast_valid(copy.deepcopy(EXAMPLE_A), True) and _fast_valid(copy.deepcopy(EXAMPLE_A), False)
