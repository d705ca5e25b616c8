"""A trainer top-K list that misses ids of the rollout's list is warned about by the audit (the certificate there is
looser), and not when it covers them."""

from __future__ import annotations

from workers.fidelity import audit_records

from .helpers import variant


def test_uncovered_trainer_list_is_warned(A, toy):
    rep = audit_records([A], tokenizer=toy)
    assert rep["coverage"]["certificates"]["trainer_list_uncovered_positions"] == 0
    assert not any("misses ids" in w for w in rep["protocol_warnings"])
    short = variant(A, **{"trainer.top_k": [[[20, -0.127833]], [[21, -0.693147], [24, -0.916291]], [[3, -0.01005]]]})
    rep = audit_records([short], tokenizer=toy)
    assert rep["coverage"]["certificates"]["trainer_list_uncovered_positions"] == 2  # 24 at 0, 22 at 2
    assert [w for w in rep["protocol_warnings"] if "misses ids" in w] == [
        "trainer.top_k misses ids of rollout.top_k at 2 position(s) sent for certificates: fcr/1 requires the "
        "trainer list to cover them; the certificates there are looser"
    ]
    assert rep["calls"][0]["verifiable_tokens"] == 3  # looser, not excluded
