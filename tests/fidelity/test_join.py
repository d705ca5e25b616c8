"""``join``: the trainer side (recomputed log-probs, loss masks, sample ids, declared task hashes) attached to an
imported inference log by call id or (trajectory, index); ambiguous or missing matches and bad arrays are refused with
the record named and nothing written; after the join an imported vLLM call reaches verifiable spans."""

from __future__ import annotations

import copy

import orjson
import pytest

from workers.fidelity import audit_file
from workers.fidelity.cli import main
from workers.fidelity.join import JoinError, join

from .conftest import TASK_LIST_FILES
from .helpers import dumps
from .test_importers import chat_exchange, run_vllm

TRAINER_LPS = [-0.127833, -0.693147, -0.01005]


def imported(tmp_path, toy, exchanges=None, **meta):
    ex = chat_exchange()
    ex["meta"].pop("task_prompt_sha256_declared")  # the gateway log cannot know it: the trainer declares it
    ex["meta"].update(meta)
    return run_vllm(tmp_path, exchanges or [ex], toy)


def trainer_row(**over):
    row = {
        "call_id": "chatcmpl-1",
        "logprobs": TRAINER_LPS,
        "loss_mask_used": [1, 1, 1],
        "sample_id": "s0",
        "policy_version": 7,
        "task_prompt_sha256_declared": TASK_LIST_FILES,
        "response_token_ids": [20, 21, 3],
    }
    row.update(over)
    return {k: v for k, v in row.items() if v is not None}


def write(tmp_path, rows, name="trainer.jsonl"):
    p = tmp_path / name
    p.write_bytes(dumps(rows))
    return p


def test_join_makes_an_imported_call_verifiable(tmp_path, toy):
    _, _, inf = imported(tmp_path, toy)
    before = audit_file(inf, tokenizer=toy)
    assert before["coverage"]["verifiable_policy_tokens"] == 0 and before["calls"][0]["reasons"] == [
        "LINEAGE_UNVERIFIED",
        "TRAINER_LOGPROB_MISSING",
    ]  # no declared task hash, no trainer side
    out = tmp_path / "joined.jsonl"
    stats = join(inf, write(tmp_path, [trainer_row()]), out)
    assert stats == {"records": 1, "joined": 1, "untrained": 0, "trainer_rows": 1, "roles_declared": 0}
    rec = orjson.loads(out.read_bytes())
    assert rec["trainer"] == {
        "logprobs": TRAINER_LPS,
        "loss_mask_used": [1, 1, 1],
        "sample_id": "s0",
        "policy_version": 7,
    }
    assert rec["prompt"]["task_prompt_sha256_declared"] == TASK_LIST_FILES
    rep = audit_file(out, tokenizer=toy)
    assert rep["verdict_label"] == "PASS" and rep["headline"] == "100% of policy tokens verifiable (3 of 3)"
    assert rep["calls"][0]["spans"] == [{"start": 0, "end": 3, "verifiable": True, "reasons": []}]


def test_join_by_trajectory_and_index_with_parallel_topk_and_declared_role(tmp_path, toy):
    ex = chat_exchange()
    ex["meta"]["headers"] = {}  # no role header: the importer says unknown/default
    _, recs, inf = run_vllm(tmp_path, [ex], toy)
    assert recs[0]["role"] == "unknown"
    row = trainer_row(
        call_id=None,
        trajectory_id="tA",
        call_index=0,
        role="policy",
        loss_mask_used=None,
        response_mask=[1, 1, 0],
        top_k_ids=[[20, 24], [21, 24], [3, 22]],
        top_k_logprobs=[[-0.127833, -2.813411], [-0.693147, -0.916291], [-0.01005, -5.115996]],
    )
    out = tmp_path / "joined.jsonl"
    assert join(inf, write(tmp_path, [row]), out)["roles_declared"] == 1
    rec = orjson.loads(out.read_bytes())
    assert (rec["role"], rec["role_source"]) == ("policy", "config")
    assert rec["trainer"]["loss_mask_used"] == [1, 1, 0]
    assert rec["trainer"]["top_k"][1] == [[21, -0.693147], [24, -0.916291]]
    assert audit_file(out, tokenizer=toy)["coverage"]["verifiable_policy_tokens"] == 3


def test_join_reads_a_parquet_trainer_side(tmp_path, toy):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    _, _, inf = imported(tmp_path, toy)
    path = tmp_path / "trainer.parquet"
    pq.write_table(pa.Table.from_pylist([trainer_row()]), path)
    out = tmp_path / "joined.jsonl"
    assert join(inf, path, out)["joined"] == 1
    assert orjson.loads(out.read_bytes())["trainer"]["logprobs"] == TRAINER_LPS


REFUSALS = [
    ("missing", [trainer_row(call_id="chatcmpl-9")], "chatcmpl-9 matches no inference record"),
    ("twice", [trainer_row(), trainer_row()], "call_id 'chatcmpl-1' is also given at line 1"),
    ("misaligned", [trainer_row(logprobs=[-0.1, -0.2])], "trainer.logprobs: length 2 != len(response.token_ids) 3"),
    ("bool", [trainer_row(logprobs=[-0.1, False, -0.2])], "trainer.logprobs[1]: log-prob must be a number or null"),
    ("ids", [trainer_row(response_token_ids=[20, 21, 4])], "response_token_ids differ"),
    ("mask", [trainer_row(loss_mask_used=[1, 2, 1])], "trainer.loss_mask_used[1]: mask value must be 0 or 1"),
    ("nolp", [trainer_row(logprobs=None)], "no logprobs"),
    ("nokey", [trainer_row(call_id=None)], "names no inference record"),
    ("step", [trainer_row(step=8)], "step 8 conflicts"),
]


@pytest.mark.parametrize("name,rows,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_join_refuses_with_the_record_named(tmp_path, toy, name, rows, message):
    _, _, inf = imported(tmp_path, toy)
    out = tmp_path / "joined.jsonl"
    with pytest.raises(JoinError) as exc:
        join(inf, write(tmp_path, rows), out)
    assert message in str(exc.value), str(exc.value)
    assert "trainer.jsonl:" in str(exc.value) or "inference in.jsonl:" in str(exc.value)
    assert not out.exists() and not (tmp_path / "joined.jsonl.partial").exists()


def test_n_greater_than_one_needs_call_ids_and_untrained_policy_calls_are_refused(tmp_path, toy):
    ex = chat_exchange()
    second = copy.deepcopy(ex["response"]["choices"][0])
    second["index"] = 1
    ex["response"]["choices"].append(second)
    ex["response"]["usage"] = None
    _, recs, inf = run_vllm(tmp_path, [ex], toy)
    assert [r["call_id"] for r in recs] == ["chatcmpl-1#0", "chatcmpl-1#1"]
    by_index = trainer_row(call_id=None, trajectory_id="tA", call_index=0)
    with pytest.raises(JoinError, match="matches more than one inference record"):
        join(inf, write(tmp_path, [by_index]), tmp_path / "o.jsonl")
    only_first = trainer_row(call_id="chatcmpl-1#0")
    with pytest.raises(JoinError, match=r"call chatcmpl-1#1\): policy call with no trainer row"):
        join(inf, write(tmp_path, [only_first]), tmp_path / "o.jsonl")
    stats = join(inf, write(tmp_path, [only_first]), tmp_path / "o.jsonl", allow_untrained=True)
    assert (stats["joined"], stats["untrained"]) == (1, 1)


def test_cli_join(tmp_path, toy, capsys):
    _, _, inf = imported(tmp_path, toy)
    out = tmp_path / "joined.jsonl"
    assert main(["join", str(inf), str(write(tmp_path, [trainer_row()])), str(out), "--json"]) == 0
    assert '"joined": 1' in capsys.readouterr().out
    assert main(["join", str(inf), str(write(tmp_path, [trainer_row(call_id="x")])), str(out)]) == 2
    assert "x matches no inference record" in capsys.readouterr().err


def test_join_never_crashes_on_arbitrary_rows(tmp_path, toy):
    from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

    _, _, inf = imported(tmp_path, toy)
    json_value = st.recursive(
        st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=4),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
        max_leaves=12,
    )
    keys = st.sampled_from(
        [
            "call_id",
            "trajectory_id",
            "call_index",
            "logprobs",
            "top_k",
            "top_k_ids",
            "top_k_logprobs",
            "loss_mask_used",
            "response_mask",
            "sample_id",
            "policy_version",
            "task_prompt_sha256_declared",
            "response_token_ids",
            "role",
            "step",
            "trainer",
        ]
    )

    @hsettings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.dictionaries(keys, json_value, max_size=6), max_size=3), st.booleans())
    def check(rows, good_first):
        if good_first:
            rows = [trainer_row()] + rows
        (tmp_path / "fz.jsonl").write_bytes(dumps(rows))
        out = tmp_path / "fz.out.jsonl"
        out.unlink(missing_ok=True)
        try:
            join(inf, tmp_path / "fz.jsonl", out)
        except JoinError as exc:
            assert exc.problems and not out.exists()
        else:
            from workers.fcr import validate_file

            assert validate_file(out)["valid"]

    check()


def test_join_reads_an_fcr_parquet_run_log_as_the_trainer_side(tmp_path, toy):
    """The training-loop client library writes fcr-parquet/1 run logs: whole records whose trainer block is joined."""
    import pytest as _pytest

    _pytest.importorskip("pyarrow")
    from workers.fcr.parquet_write import jsonl_to_parquet

    _, recs, inf = imported(tmp_path, toy)
    full = dict(
        recs[0], trainer={"logprobs": TRAINER_LPS, "loss_mask_used": [1, 1, 1], "sample_id": "s9", "policy_version": 7}
    )
    full["prompt"] = dict(full["prompt"], task_prompt_sha256_declared=TASK_LIST_FILES)
    (tmp_path / "full.jsonl").write_bytes(dumps([full]))
    jsonl_to_parquet(tmp_path / "full.jsonl", tmp_path / "trainer.parquet")
    out = tmp_path / "joined.jsonl"
    assert join(inf, tmp_path / "trainer.parquet", out)["joined"] == 1
    rec = orjson.loads(out.read_bytes())
    assert rec["trainer"]["sample_id"] == "s9" and rec["trainer"]["logprobs"] == TRAINER_LPS
    assert rec["prompt"]["task_prompt_sha256_declared"] == TASK_LIST_FILES
    assert audit_file(out, tokenizer=toy)["headline"] == "100% of policy tokens verifiable (3 of 3)"
