"""Trainer batches → fcr-parquet/1 rows: spans under the mask, shapes, refusals."""

import numpy as np
import pyarrow as pa
import pytest

from audit_portal_client.fcr import RecordMeta, arrow_schema, step_table

META = RecordMeta(run_id="r")


def batch(B=3, T=7, K=4, seed=0):
    rng = np.random.default_rng(seed)
    a = -rng.uniform(0.01, 3, (B, T))
    return dict(
        rollout_logprobs=a.astype(np.float32),
        trainer_logprobs=(a + rng.normal(0, 0.01, (B, T))).astype(np.float32),
        response_ids=rng.integers(0, 1000, (B, T)),
        response_mask=np.ones((B, T), np.int8),
        rollout_topk_ids=rng.integers(0, 1000, (B, T, K)),
        rollout_topk_logprobs=-rng.uniform(0, 5, (B, T, K)),
    )


def test_one_call_per_contiguous_span_and_padding_dropped():
    b = batch()
    mask = np.array([[1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0]])
    b["response_mask"] = mask
    b["prompt_ids"] = np.array([[0, 0, 5, 6], [7, 8, 9, 10], [0, 1, 2, 3]])
    b["prompt_mask"] = np.array([[0, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]])
    t = step_table(META, 4, **b)
    assert t.num_rows == 3  # row 0: one span; row 1: two turns; row 2: nothing sampled
    assert t.column("response_token_ids").to_pylist() == [
        b["response_ids"][0, :4].tolist(),
        b["response_ids"][1, :2].tolist(),
        b["response_ids"][1, 4:].tolist(),
    ]
    prompts = t.column("prompt_token_ids").to_pylist()
    assert prompts[0] == [5, 6]  # left padding removed
    assert prompts[2] == [7, 8, 9, 10] + b["response_ids"][1, :4].tolist()  # the second turn sees the first
    assert t.column("call_index").to_pylist() == [0, 0, 1]
    assert t.column("step").to_pylist() == [4, 4, 4]
    lp = t.column("rollout_logprobs").to_pylist()
    assert np.allclose(lp[2], b["rollout_logprobs"][1, 4:])
    topk = t.column("rollout_topk_ids").to_pylist()
    assert topk[1] == b["rollout_topk_ids"][1, :2].tolist()
    assert t.column("trainer_topk_ids").null_count == 3


def test_schema_is_the_fcr_parquet_one():
    t = step_table(META, 0, **batch())
    assert t.schema.equals(arrow_schema("float32"), check_metadata=True)
    assert t.schema.metadata[b"fcr.format"] == b"fcr-parquet/1"


def test_torch_tensors_in_bf16_are_accepted():
    torch = pytest.importorskip("torch")
    b = {k: torch.from_numpy(np.asarray(v)) for k, v in batch().items()}
    b["rollout_logprobs"] = b["rollout_logprobs"].to(torch.bfloat16)
    t = step_table(META, 1, **b)
    assert t.num_rows == 3


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda b: b.update(trainer_logprobs=b["trainer_logprobs"][:, :5]),
            r"trainer_logprobs: expected shape \[3, 7\], got \[3, 5\]",
        ),
        (lambda b: b.update(response_ids=None), "response_ids: required"),
        (lambda b: b.update(rollout_topk_logprobs=None), "give both or neither"),
        (lambda b: b["rollout_logprobs"].__setitem__((1, 2), np.nan), r"rollout_logprobs\[1, 2\] is nan"),
        (lambda b: b["response_ids"].__setitem__((2, 0), -1), r"response_ids\[2, 0\] is -1"),
    ],
)
def test_bad_batches_are_refused_naming_the_array(change, message):
    b = batch()
    change(b)
    with pytest.raises(ValueError, match=message):
        step_table(META, 0, **b)


def test_masked_positions_may_hold_anything():
    b = batch()
    b["rollout_logprobs"][0, 5:] = np.nan
    b["response_mask"][0, 5:] = 0
    t = step_table(META, 0, **b)
    assert [len(x) for x in t.column("rollout_logprobs").to_pylist()] == [5, 7, 7]
    assert isinstance(t.column("rollout_logprobs"), pa.ChunkedArray)


def test_pad_rows_gives_the_shapes_log_step_takes():
    from audit_portal_client import pad_rows

    lps, mask = pad_rows([[-0.5, -1.0, -0.1], [-2.0]])
    ids, _ = pad_rows([[4, 5, 6], [7]], dtype=np.int64)
    assert lps.shape == (2, 3) and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    t = step_table(META, 0, rollout_logprobs=lps, trainer_logprobs=lps, response_mask=mask, response_ids=ids)
    assert t.column("response_token_ids").to_pylist() == [[4, 5, 6], [7]]
