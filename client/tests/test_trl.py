"""The TRL integration on a real GRPOTrainer (two optimisation steps, tiny random model, CPU): what reaches the
run log is the trainer's completion tensors, aligned with the mask, one record per completion."""

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("trl")

from audit_portal_client import Client
from audit_portal_client.integrations.trl import AuditPortalCallback

from tiny_grpo import tiny_grpo_trainer


def test_two_grpo_steps_are_logged(tmp_path):
    run = Client("http://127.0.0.1:9", "unused").run(
        "p", "grpo-tiny", spool_dir=tmp_path / "spool", live=False, segment_steps=100
    )
    trainer = tiny_grpo_trainer(tmp_path / "out")
    cb = AuditPortalCallback(run, finish_on_end=False).attach(trainer)
    trainer.train()
    assert trainer.state.global_step == 2 and cb.batches_logged == 2
    assert cb.rollout_source == "recomputed at generation (no grad)"
    run._close_segment()
    seg = sorted(Path(tmp_path / "spool").glob("seg-*.parquet"))
    t = pq.read_table(seg[0])
    assert t.num_rows == 8  # 2 steps x 4 completions (every completion has at least one token)
    assert sorted(set(t.column("step").to_pylist())) == [0, 1]
    lens = [len(x) for x in t.column("response_token_ids").to_pylist()]
    assert all(1 <= n <= 8 for n in lens)
    for ro, tr in zip(t.column("rollout_logprobs").to_pylist(), t.column("trainer_logprobs").to_pylist()):
        ro, tr = np.asarray(ro), np.asarray(tr)
        assert len(ro) == len(tr) and (ro <= 0).all() and (tr <= 0).all()
        assert np.abs(ro - tr).max() < 1e-3  # same weights, eval vs train forward (no dropout): numerics only


def test_top_k_on_both_sides_agrees_with_the_logged_log_probs(tmp_path):
    """The callback's top-K (an extra no-grad forward, logits / temperature) holds the sampled token's log-prob as
    TRL computed it, on both sides, whenever the sampled token is among the K."""
    run = Client("http://127.0.0.1:9", "unused").run(
        "p", "grpo-topk", spool_dir=tmp_path / "spool", live=False, segment_steps=100
    )
    trainer = tiny_grpo_trainer(tmp_path / "out")
    cb = AuditPortalCallback(run, finish_on_end=False, topk=4).attach(trainer)
    trainer.train()
    run.flush()
    assert cb.topk_note is None
    t = pq.read_table(sorted(Path(tmp_path / "spool").glob("seg-*.parquet"))[0]).to_pydict()
    found = 0
    for side in ("rollout", "trainer"):
        for y, lp, ids, lps in zip(
            t["response_token_ids"], t[f"{side}_logprobs"], t[f"{side}_topk_ids"], t[f"{side}_topk_logprobs"]
        ):
            assert ids is not None and len(ids) == len(y) and all(len(row) == 4 for row in ids)
            for tok, v, row_ids, row_lps in zip(y, lp, ids, lps):
                assert list(row_lps) == sorted(row_lps, reverse=True) and max(row_lps) <= 0
                if tok in row_ids:
                    found += 1
                    assert row_lps[row_ids.index(tok)] == pytest.approx(v, abs=1e-4)
                else:
                    assert v <= min(row_lps) + 1e-4  # not in the top K: no more likely than the K-th
    assert found > 0


def test_top_k_off_says_so(tmp_path):
    run = Client("http://127.0.0.1:9", "unused").run("p", "grpo-nok", spool_dir=tmp_path / "spool", live=False)
    trainer = tiny_grpo_trainer(tmp_path / "out", max_steps=1)
    cb = AuditPortalCallback(run, finish_on_end=False, topk=0).attach(trainer)
    trainer.train()
    run.flush()
    t = pq.read_table(sorted(Path(tmp_path / "spool").glob("seg-*.parquet"))[0])
    assert t.column("trainer_topk_ids").null_count == t.num_rows and "topk=0" in cb.topk_note
