"""Bad input never crashes an importer: arbitrary JSON lines (and mutated real shapes) become records or ``missing``
records, every output validates as fcr/1, and nothing raises."""

from __future__ import annotations

import copy

import orjson
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from workers.fcr import validate_file
from workers.fidelity.importers import import_agl, import_agl_events, import_vllm
from workers.fidelity.importers.sglang import import_sglang
from workers.fidelity.importers.trajectories import import_trajectories

from workers.fidelity import audit_file

from .test_importer_agl_shapes import trace, v1_events
from .test_importer_nemo_rl import sample as nemo_sample
from .test_importer_sglang import exchange, output
from .test_importer_trajectories import skyrl_batch, slime_sample, verl_output
from .test_importer_verl_dataproto import TOOL as verl_dataproto_row
from .test_importers import chat_exchange

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 50) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=20,
)
SEEDS = {
    "vllm": chat_exchange(),
    "sglang": exchange(output()),
    "agl-events": v1_events()[0],
    "verl": verl_output(param_version_start=3, param_version_end=3),
    "verl-dataproto": verl_dataproto_row,  # imported as verl: padded tensors, both sides
    "slime": slime_sample(),
    "skyrl": skyrl_batch(),
    "nemo-rl": nemo_sample(),
}


def paths(obj, prefix=()):
    """Every (path) into a nested JSON value."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            yield from paths(v, prefix + (i,))


def mutate(obj, path, value):
    obj = copy.deepcopy(obj)
    if not path:
        return value
    cur = obj
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return obj


def run(kind, tmp_path, lines):
    """Import ``lines`` as ``kind``; every output record validates. Returns the output path."""
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(b"".join((orjson.dumps(x) if not isinstance(x, bytes) else x) + b"\n" for x in lines))
    if kind == "vllm":
        import_vllm(src, dst)
    elif kind == "sglang":
        import_sglang(src, dst)
    elif kind == "agl-events":
        import_agl_events(src, dst)
    elif kind == "agl":
        import_agl(src, dst, agent_match="Assistant")
    else:
        import_trajectories(src, dst, fmt=kind.removesuffix("-dataproto"))
    summary = validate_file(dst) if dst.stat().st_size else {"valid": True}
    assert summary["valid"], (kind, summary["errors"][:3])
    return dst


@hsettings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(sorted(SEEDS) + ["agl"]), data=st.data())
def test_importers_never_crash_on_mutated_shapes(tmp_path_factory, kind, data):
    seed = trace()[2] if kind == "agl" else SEEDS[kind]
    all_paths = list(paths(seed))
    path = data.draw(st.sampled_from(all_paths))
    value = data.draw(JSON)
    run(kind, tmp_path_factory.mktemp(kind), [mutate(seed, path, value), seed, b"not json", b"[1, 2]"])


@hsettings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(sorted(SEEDS) + ["agl"]), lines=st.lists(JSON, min_size=1, max_size=4))
def test_importers_never_crash_on_arbitrary_json(tmp_path_factory, kind, lines):
    run(kind, tmp_path_factory.mktemp(kind), lines)


def _as_trained(path):
    """Every imported call as a declared policy call trained on exactly its rollout values (the most favourable
    trainer side), so that only the import's own evidence decides what is verifiable."""
    out = []
    for raw in path.read_bytes().splitlines():
        rec = orjson.loads(raw)
        rec["role"], rec["role_source"] = "policy", "config"
        rec["engine"]["logprobs_mode"] = "processed_logprobs"  # configuration, not evidence about ids or values
        rec["prompt"]["task_prompt_sha256_declared"] = rec["prompt"].get("task_prompt_sha256_observed")
        tr = rec.setdefault("trainer", {})
        tr["logprobs"] = [v for v in rec["rollout"]["logprobs"]]
        tr.pop("top_k", None)
        out.append(rec)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in out))
    return out


@hsettings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(sorted(SEEDS)), data=st.data())
def test_no_verifiable_token_without_engine_ids_and_engine_logprobs(tmp_path_factory, kind, data):
    """#27: whatever the input, a verifiable position has engine response ids, prompt ids the engine saw, a
    log-prob the importer read from the engine (not a placeholder, not re-encoded) and, for a partial rollout, a
    known version."""
    seed = SEEDS[kind]
    lines = [mutate(seed, data.draw(st.sampled_from(list(paths(seed)))), data.draw(JSON)) for _ in range(2)]
    dst = run(kind, tmp_path_factory.mktemp(kind), lines + [seed])
    recs = _as_trained(dst)
    rep = audit_file(dst, mode="merged")
    for rec, call in zip(recs, rep["calls"]):
        ro = rec["rollout"]
        unverified = {t for a, b, _ in ro.get("logprob_unverified") or [] for t in range(a, b)}
        for span in call["spans"]:
            if not span["verifiable"]:
                continue
            assert rec["response"]["provenance"] in ("engine", "engine_token_strings"), (kind, rec)
            assert rec["prompt"]["provenance"] in ("engine", "engine_input"), (kind, rec)
            for t in range(span["start"], span["end"]):
                assert type(ro["logprobs"][t]) in (int, float) and t not in unverified, (kind, t, rec)
                assert ro.get("token_policy_versions") is None or ro["token_policy_versions"][t] is not None


@pytest.mark.parametrize("kind", sorted(set(SEEDS) - {"sglang"}))  # (a token-only request: no task text, lineage)
def test_the_property_is_not_vacuous(tmp_path, kind):
    """The clean seed of each shape, trained as above, does have verifiable tokens."""
    dst = run(kind, tmp_path, [SEEDS[kind]])
    _as_trained(dst)
    assert all(c["verifiable_tokens"] for c in audit_file(dst, mode="merged")["calls"])
