"""The TRL integration on a real GRPOTrainer (two optimisation steps, tiny random model, CPU): what reaches the
run log is the trainer's completion tensors, aligned with the mask, one record per completion."""
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("trl")

from audit_portal_client import Client  # noqa: E402
from audit_portal_client.integrations.trl import AuditPortalCallback  # noqa: E402

from tiny_grpo import tiny_grpo_trainer  # noqa: E402


def test_two_grpo_steps_are_logged(tmp_path):
    run = Client("http://127.0.0.1:9", "unused").run("p", "grpo-tiny", spool_dir=tmp_path / "spool", live=False,
                                                     segment_steps=100)
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
