"""Steps of a GRPO-like run for the live-run tests: right-padded responses, top-K on both sides, and a
rollout/trainer mismatch of a chosen size (larger noise: larger ε̂ and B*)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client"))


def step_batch(step, noise=0.002, B=4, T=24, K=5, rank=0):
    rng = np.random.default_rng(1000 + step + 7919 * rank)  # each process (rank) its own sequences of a step
    logits = rng.normal(0, 3, (B, T, 50))
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    lq = lp + rng.normal(0, noise, lp.shape)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    ids = np.argsort(-lp, -1)[..., :K]
    y = ids[..., 0]
    mask = (np.arange(T)[None, :] < rng.integers(T // 2, T + 1, (B, 1))).astype(np.int8)

    def take(a, i):
        return np.take_along_axis(a, i, -1)

    return dict(
        rollout_logprobs=take(lp, y[..., None])[..., 0],
        trainer_logprobs=take(lq, y[..., None])[..., 0],
        response_mask=mask,
        response_ids=y,
        prompt_ids=rng.integers(0, 50, (B, 6)),
        rollout_topk_ids=ids,
        rollout_topk_logprobs=take(lp, ids),
        trainer_topk_ids=ids,
        trainer_topk_logprobs=take(lq, ids),
    )


def write_steps(path, run_name, steps, noise=0.002, rank=0):
    """The steps as one fcr-parquet/1 file, written the way the client writes a segment (by process ``rank``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from audit_portal_client.fcr import RecordMeta, step_table

    prefix = f"{run_name}-" + (f"r{rank}-" if rank else "")
    tables = [
        step_table(RecordMeta(run_id=run_name), s, call_prefix=f"{prefix}{s}-", **step_batch(s, noise, rank=rank))
        for s in steps
    ]
    pq.write_table(pa.concat_tables(tables), path)
    return path
