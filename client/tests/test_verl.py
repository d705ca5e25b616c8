"""The verl hook on a DataProto-shaped batch (verl 0.9.1's field names and shapes, read from its source: protocol.py,
trainer/ppo/ray_trainer.py, utils/debug/metrics.py) and, where verl imports, on a real ``DataProto`` through the real
``calculate_debug_metrics`` hook point. verl cannot be installed into the repository's environment (its dependencies
would replace pinned packages: tokenizers 0.23.3 → 0.22.2, transformers, huggingface_hub; and add ray, wandb, …); the
real-DataProto test runs when ``import verl`` works, e.g. with verl==0.9.1, tensordict==0.10.0, ray==2.60.0 and the
few modules its protocol imports installed with ``pip install --no-deps --target DIR`` on PYTHONPATH."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from audit_portal_client import Client
from audit_portal_client.integrations.verl import install, log_dataproto


def verl_batch(B=4, P=5, R=6, seed=0):
    """What the batch holds after ``batch.union(old_log_prob)``: left-padded prompts, right-padded responses."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(5, 100, (B, P), generator=g)
    responses = torch.randint(5, 100, (B, R), generator=g)
    p_att = torch.ones(B, P, dtype=torch.long)
    p_att[0, :2] = 0  # left padding
    r_att = (torch.arange(R)[None, :] < torch.tensor([[R], [3], [R], [1]])).long()
    rollout = -torch.rand(B, R, generator=g) * 3
    old = rollout + torch.randn(B, R, generator=g) * 1e-3
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": torch.cat([p_att, r_att], 1),
        "response_mask": r_att.clone(),
        "rollout_log_probs": rollout,
        "old_log_probs": old,
    }
    return tensors, {"uid": np.array(["q0", "q0", "q1", "q1"], dtype=object)}, {"global_steps": 7}


def spool_table(run):
    run._close_segment()
    return pq.read_table(sorted(Path(run.spool.root).glob("seg-*.parquet"))[0])


def check(t, tensors):
    assert t.num_rows == 4 and t.column("step").to_pylist() == [7] * 4
    lens = [len(x) for x in t.column("response_token_ids").to_pylist()]
    assert lens == [6, 3, 6, 1]  # response_mask spans; padding dropped
    assert t.column("response_token_ids").to_pylist()[1] == tensors["responses"][1, :3].tolist()
    assert t.column("prompt_token_ids").to_pylist()[0] == tensors["prompts"][0, 2:].tolist()
    assert np.allclose(t.column("trainer_logprobs").to_pylist()[3], tensors["old_log_probs"][3, :1].numpy())
    assert t.column("trajectory_id").to_pylist() == ["q0-0", "q0-1", "q1-2", "q1-3"]


def trainer_routes(row: dict, L: int, K: int) -> np.ndarray:
    """A spooled row's trainer routes [T, L, K], decoded from trainer_routes_delta (ROUTES_SAME: the rollout's)."""
    from audit_portal_client.fcr import ROUTES_SAME

    rollout, delta = np.asarray(row["rollout_routed_experts"]), np.asarray(row["trainer_routes_delta"])
    assert row["trainer_routed_experts"] is None  # written as a difference whenever both sides are there
    return np.where(delta == ROUTES_SAME, rollout, delta).reshape(-1, L, K)


def new_run(tmp_path):
    return Client("http://127.0.0.1:9", "unused").run("p", "verl", spool_dir=tmp_path / "s", live=False)


def test_dataproto_shaped_batch(tmp_path):
    tensors, non_tensors, meta = verl_batch()
    run = new_run(tmp_path)
    assert log_dataproto(run, SimpleNamespace(batch=tensors, non_tensor_batch=non_tensors, meta_info=meta)) == 4
    check(spool_table(run), tensors)


def test_missing_rollout_log_probs_is_named(tmp_path):
    tensors, non_tensors, meta = verl_batch()
    del tensors["rollout_log_probs"]
    with pytest.raises(ValueError, match="rollout_log_probs.*calculate_log_probs"):
        log_dataproto(new_run(tmp_path), SimpleNamespace(batch=tensors, non_tensor_batch=non_tensors, meta_info=meta))


def test_real_dataproto_through_the_debug_metrics_hook(tmp_path):
    protocol = pytest.importorskip("verl.protocol", reason="verl is not installable in this environment")
    import verl.utils.debug.metrics as debug_metrics

    tensors, non_tensors, meta = verl_batch()
    batch = protocol.DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)
    run = new_run(tmp_path)
    remove = install(run)
    try:
        from verl.utils.debug.metrics import calculate_debug_metrics  # what ray_trainer.fit imports each step

        metrics = calculate_debug_metrics(batch)
    finally:
        remove()
    assert debug_metrics.calculate_debug_metrics.__module__ == "verl.utils.debug.metrics"
    assert metrics and run.last_error is None
    check(spool_table(run), tensors)
