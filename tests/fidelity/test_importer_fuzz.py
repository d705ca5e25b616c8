"""Bad input never crashes an importer: arbitrary JSON lines (and mutated real shapes) become records or ``missing``
records, every output validates as fcr/1, and nothing raises."""
from __future__ import annotations

import copy

import orjson
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from workers.fcr import validate_file
from workers.fidelity.importers import import_agl, import_agl_events, import_vllm
from workers.fidelity.importers.sglang import import_sglang
from workers.fidelity.importers.trajectories import import_trajectories

from .test_importer_agl_shapes import trace, v1_events
from .test_importer_sglang import exchange, output
from .test_importer_trajectories import skyrl_batch, slime_sample, verl_output
from .test_importers import chat_exchange

JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 50) | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20)
SEEDS = {"vllm": chat_exchange(), "sglang": exchange(output()), "agl-events": v1_events()[0],
         "verl": verl_output(), "slime": slime_sample(), "skyrl": skyrl_batch()}


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
        import_trajectories(src, dst, fmt=kind)
    summary = validate_file(dst) if dst.stat().st_size else {"valid": True}
    assert summary["valid"], (kind, summary["errors"][:3])


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
