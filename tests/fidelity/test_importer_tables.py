"""The importers' declarative tables (workers/fidelity/importers/fields.py, registry.py): the shared transforms and
reading rules against hand-worked values, and a property test that runs over every table of every registered
importer — each source field of each row set to a random, wrong-typed or missing value — and checks that the
importer never raises, every output validates as fcr/1 and names its input line, a failed line carries its own
error, and no verifiable token lacks engine ids and an engine log-prob (#27)."""

from __future__ import annotations

import copy

import orjson
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from workers.fidelity import audit_file
from workers.fidelity.importers.fields import (
    TRANSFORMS,
    Field,
    Rung,
    first_of_lists,
    id_array,
    ids,
    integer,
    ladder,
    number,
    path_get,
    read_table,
    token_id_strings,
    entry_ids,
    version,
)
from workers.fidelity.importers.common import safe_literal
from workers.fidelity.importers.registry import IMPORTER_META, tables_of
from workers.fidelity.importers.trajectories import nemo_stand_ins, skyrl_key, slime_versions, span_versions

from .conftest import PROMPT_A
from .test_importer_agl_shapes import trace
from .test_importer_fuzz import JSON, SEEDS, _as_trained, run

# -- transforms and reading rules ------------------------------------------------------------------------------------


def test_typed_transforms():
    assert version(3) == 3 and version("12") == 12 and version("v3") is None and version(True) is None
    assert version(3.0) is None and version(-1) == -1 and version("") is None
    assert integer(True) is None and integer(2) == 2 and integer(2.0) is None
    assert number(False) is None and number(1.5) == 1.5 and number("1") is None
    assert ids([1, 2]) == [1, 2] and ids("[1, 2]") == [1, 2] and ids("(1, 2)") == [1, 2]
    assert ids([1, -2]) is None and ids([1, True]) is None and ids([1.0]) is None
    assert id_array("[1, 2]") is None and id_array([3]) == [3]  # a prompt string is text, never ids
    assert first_of_lists([[4, 5], [6]]) == [4, 5] and first_of_lists("[[4], [5]]") == [4] and first_of_lists(7) == 7
    assert token_id_strings(["token_id:4", "token_id:0"]) == [4, 0] and token_id_strings(["token_id:4", "x"]) is None
    assert token_id_strings([]) is None and entry_ids([[-0.1, 7, "a"], [-0.2, 8]]) == [7, 8]
    assert entry_ids([[-0.1, 7], [-0.2]]) is None and entry_ids([[-0.1, -7]]) is None and entry_ids([]) is None
    assert set(TRANSFORMS) >= {"keep", "version", "ids", "id_array", "integer", "number", "text", "truthy"}


def test_path_get_reads_only_through_objects():
    obj = {"a": {"b": [1], "c": None}, "l": [{"x": 1}]}
    assert path_get(obj, "a.b") == [1] and path_get(obj, "a.c") is None
    absent = path_get(obj, "a.z")
    assert path_get(obj, "l.0.x") is absent and path_get(obj, "a.b.0") is absent and path_get(None, "a") is absent


@pytest.mark.parametrize(
    "obj, pick, want",
    [
        ({"a": None, "b": 0, "c": 5}, "set", 0),  # a if a is not None else b
        ({"a": None, "b": 0, "c": 5}, "present", None),  # obj.get(a, obj.get(b))
        ({"a": None, "b": 0, "c": 5}, "truthy", 5),  # a or b or c
        ({"b": 0, "c": 5}, "present", 0),
        ({"a": None, "b": 0, "c": 5}, "key", "b"),  # which key was set
        ({}, "set", None),
    ],
)
def test_pick_rules(obj, pick, want):
    assert Field("t", ("a", "b", "c"), pick=pick).read(obj) == want


def test_valid_pick_skips_values_the_transform_refuses():
    f = Field("v", ("m.version", "version", "other"), version, pick="valid")
    assert f.read({"m": {"version": "x"}, "version": "7", "other": 1}) == 7
    assert Field("v", ("m.version", "version"), version).read({"m": {"version": "x"}, "version": 7}) is None


def test_flat_keys_and_suffix():
    attrs = {"gen_ai.request.model": "m", "z.choices.0.token_ids": [1], "a.choices.0.token_ids": None}
    assert Field("t", ("gen_ai.request.model",), flat=True).read(attrs) == "m"
    assert Field("t", ("gen_ai.request.model",)).read(attrs) is None  # a dotted path, not the flat key
    assert Field("t", ("choices.0.token_ids",), flat=True, pick="suffix").read(attrs) == [1]
    assert Field("t", ("x",), flat=True).read(["x"]) is None


def test_read_table_optional_and_ladder_order():
    table = (Field("extra.a", ("a",), integer, optional=True), Field("b", ("b",)))
    assert read_table({"a": "1"}, table) == {"b": None} and read_table({"a": 1}, table) == {"extra.a": 1, "b": None}
    rungs = (
        Rung(Field("p", ("engine",), ids), "engine", ("chat",)),
        Rung(Field("p", ("sent",), id_array), "engine_input"),
    )
    assert ladder({"engine": [1], "sent": [2]}, rungs, "chat") == ([1], "engine")
    assert ladder({"engine": [1], "sent": [2]}, rungs, "completions") == ([2], "engine_input")
    assert ladder({"engine": "x", "sent": "[2]"}, rungs, "chat") == (None, None)


def test_named_transforms():
    assert span_versions(3, 3, 2) == (3, None) and span_versions("4", 4, 2) == (4, None)
    # only one end known (an end left None by a partial rollout): maybe resumed, so no token's version is known
    assert span_versions(None, "4", 2) == (None, [None, None]) and span_versions(3, None, 1) == (None, [None])
    assert span_versions(3, 5, 2) == (None, [None, None])  # resumed across updates: every token unknown
    assert span_versions(None, None, 2) == (None, None)
    assert slime_versions(["2", "2"], 3, 2) == (2, None) and slime_versions(["1", "2"], 3, 2) == (None, [None] * 2)
    spans = [[{"version": 1, "abs_start": 3, "abs_end": 4}], [{"version": "2", "abs_start": 4, "abs_end": 9}]]
    assert slime_versions(spans, 3, 3) == (None, [1, 2, 2])
    assert skyrl_key({"instance_id": "i", "repetition_id": 0}) == "i_0" and skyrl_key([1]) is None
    assert nemo_stand_ins([-0.5, 0.0, 0, 0.0], [1, 1, 0, 1]) == [(1, 2, "not_reported"), (3, 4, "not_reported")]


# -- fuzz over every table -------------------------------------------------------------------------------------------

TRIPLET_EVENT = {
    "event_type": "model_request",
    "rollout_id": "ro-1",
    "attempt_id": "at-1",
    "data": {
        "prompt_token_ids": PROMPT_A,
        "response_token_ids": [44, 3],
        "response_log_probs": [-0.3, -0.02],
        "server": {"model": "toy-policy", "version": 3},
    },
}
TRIPLET = {
    "rollout_id": "ro-2",
    "attempt_id": "at-1",
    "prompt": {"token_ids": PROMPT_A},
    "response": {"token_ids": [20, 21, 3], "logprobs": [-0.1, -0.5, -0.01]},
    "metadata": {"response_id": "r-1", "agent_name": "Assistant", "model_version": "4", "request": {"model": "m"}},
}
TOKENS_TRIPLET = {
    "rollout_id": "ro-3",
    "attempt_id": "at-1",
    "observation": {"token_ids": PROMPT_A},
    "completion": {"token_ids": [20, 3], "logprobs": [-0.2, -0.02]},
    "raw_call": {"request": {"model": "toy-policy", "temperature": 1.0}, "response": {"id": "r-2"}},
    "metadata": {"policy_version": 5},
}


def _seed(kind: str, ref: str) -> list:
    """Clean input lines for ``kind`` with the shape table ``ref`` reads."""
    if kind == "agl":
        return trace()
    if kind == "agl-events":
        table = ref.split(":")[1]
        return [
            copy.deepcopy({"EVENT_TRIPLET_FIELDS": TRIPLET_EVENT, "TRIPLET_FIELDS": TRIPLET}.get(table, TOKENS_TRIPLET))
        ]
    return [copy.deepcopy(SEEDS[kind])]


def _root(kind: str, ref: str, lines: list, source: str):
    """The object inside ``lines`` that ``source`` of table ``ref`` is read from, and the path left inside it (the
    tables of the OpenAI-compatible importers read a view: ``request.…``, ``response.…``, ``choice.…``)."""
    seed = lines[0]
    if kind == "agl":
        span = next(s for s in lines if "llm.hosted_vllm.choices" in s.get("attributes", {}))
        return span["attributes"], source
    if kind == "agl-events":
        return (seed["data"] if ref.endswith(":EVENT_TRIPLET_FIELDS") else seed), source
    head, _, rest = source.partition(".")
    if kind == "vllm":
        if head == "event" and "data" not in seed:  # the same exchange as an AGL ≥ 1.0 model_request event
            seed["rollout_id"], seed["attempt_id"] = "ro-1", "at-1"
            seed["data"] = {"request": seed.pop("request"), "response": seed.pop("response")}
        body = seed.get("data", seed)
        meta = seed.setdefault("meta", {})
        roots = {
            "request": body["request"],
            "response": body["response"],
            "choice": body["response"]["choices"][0],
            "meta": meta,
            "headers": meta.setdefault("headers", {}),
            "event": body,
        }
        return (roots[head], rest) if head in roots and rest else (body["request"], source)
    elif kind == "sglang":
        out = seed["response"] if isinstance(seed["response"], dict) else seed["response"][0]
        meta = seed.setdefault("meta", {})
        roots = {
            "request": seed["request"],
            "output": out,
            "meta_info": out.setdefault("meta_info", {}),
            "meta": meta,
            "headers": meta.setdefault("headers", {}),
        }
    else:
        return seed, source
    # request-level names (sampling) sit in the request; the view's own ``token_strings`` (the per-token strings of
    # ``logprobs``) lands there too and is read from nowhere — test_importer_fuzz mutates the logged strings
    return (roots[head], rest) if head in roots and rest else (seed["request"], source)


def _place(root, path: str, data, flat: bool) -> None:
    """Set ``path`` in ``root`` (creating the objects on the way) to a random value, the logged value with some
    elements replaced, or delete it."""
    keys = [path] if flat else path.split(".")
    cur = root
    for k in keys[:-1]:
        if not isinstance(cur.get(k), dict):
            cur[k] = {}
        cur = cur[k]
    old = cur.get(keys[-1])
    how = data.draw(
        st.sampled_from(["random", "elements", "missing"] if isinstance(old, list) and old else ["random", "missing"])
    )
    if how == "missing":
        cur.pop(keys[-1], None)
    elif how == "random":
        cur[keys[-1]] = data.draw(VALUES)
    else:
        new = list(old)
        for i in data.draw(st.lists(st.integers(0, len(old) - 1), min_size=1, max_size=3)):
            new[i] = data.draw(JSON)
        cur[keys[-1]] = new


def _rows(kind):
    out = []
    for ref, table in tables_of(kind).items():
        if isinstance(table, dict):  # a column rename: its fields are the one-trajectory table's
            continue
        for row in table:
            f = row.field if isinstance(row, Rung) else row
            out.extend((ref, f, s) for s in f.sources)
    return out


ROWS = [(kind, ref, f, s) for kind in IMPORTER_META for ref, f, s in _rows(kind)]
VALUES = (
    JSON
    | st.lists(st.integers(-2, 60), max_size=6)
    | st.sampled_from(["3", "v2", "[1, 2]", "(3, 4)", "token_id:7", "", [[1, 2]], [1.5, -0.1]])
)


@hsettings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(row=st.sampled_from(ROWS), data=st.data())
def test_every_table_field_fuzzed(tmp_path_factory, row, data):
    kind, ref, field, source = row
    lines = _seed(kind, ref)
    same_table = [(f, s) for k, r, f, s in ROWS if k == kind and r == ref]
    for f, s in [(field, source)] + data.draw(st.lists(st.sampled_from(same_table), max_size=2)):
        root, path = _root(kind, ref, lines, s)
        _place(root, path, data, f.flat)
    dst = run(kind, tmp_path_factory.mktemp(kind.replace("-", "_")), lines)
    recs = [orjson.loads(raw) for raw in dst.read_bytes().splitlines()]
    for rec in recs:
        assert rec["source"]["ref"].startswith("in.jsonl:"), rec["source"]
        err = (rec.get("extra") or {}).get("import_error")
        assert err is None or (isinstance(err, str) and err), rec
    trained = _trained(dst)
    read = _numbers_in(lines)
    rep = audit_file(dst, mode="merged")
    for rec, call in zip(trained, rep["calls"]):
        ro = rec["rollout"]
        unverified = {t for a, b, _ in ro.get("logprob_unverified") or [] for t in range(a, b)}
        for span in call["spans"]:
            if not span["verifiable"]:
                continue
            assert rec["response"]["provenance"] in ("engine", "engine_token_strings"), (ref, source, rec)
            assert rec["prompt"]["provenance"] in ("engine", "engine_input"), (ref, source, rec)
            for t in range(span["start"], span["end"]):
                assert type(ro["logprobs"][t]) in (int, float) and t not in unverified, (ref, source, t, rec)
                assert ro["logprobs"][t] in read, (ref, source, t, rec)  # read from the log, never made up
                assert ro.get("token_policy_versions") is None or ro["token_policy_versions"][t] is not None


def _numbers_in(value, out=None) -> set:
    """Every number an input holds, inside text too (span attributes hold JSON / Python-repr text): an imported
    log-prob must be one of them — an importer never writes a value it did not read."""
    out = set() if out is None else out
    if isinstance(value, str) and value[:1] in "[{(":
        value = safe_literal(value)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            _numbers_in(v, out)
    elif type(value) in (int, float):
        out.add(value)
    return out


def _trained(path):
    """:func:`_as_trained`, and the task declared as observed (a dummy hash where the log has no task text) and the
    response text left out (its check needs a tokenizer): lineage and text are no evidence about ids or
    log-probs, so only those decide what is verifiable."""
    recs = _as_trained(path)
    for rec in recs:
        p = rec["prompt"]
        p["task_prompt_sha256_observed"] = p["task_prompt_sha256_declared"] = p.get("task_prompt_sha256_observed") or (
            "0" * 64
        )
        rec["response"]["text"] = None
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return recs


def test_the_table_fuzz_reaches_every_importer():
    assert {kind for kind, *_ in ROWS} == set(IMPORTER_META)


@pytest.mark.parametrize("kind, ref", sorted({(k, r) for k, r, _, _ in ROWS}))
def test_the_table_fuzz_is_not_vacuous(tmp_path, kind, ref):
    """The clean input of each table, trained as above, has verifiable tokens: the property above is tested where
    verifiable tokens exist."""
    dst = run(kind, tmp_path, _seed(kind, ref))
    _trained(dst)
    assert sum(c["verifiable_tokens"] for c in audit_file(dst, mode="merged")["calls"]) > 0
