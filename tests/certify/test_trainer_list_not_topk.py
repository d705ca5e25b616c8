"""A trainer list that is not the trainer's own top-K (docs/fcr.md#rollout-and-trainer: trainer.top_k only has to
cover the rollout's ids) is not a data error and gets a sound interval: caps (docs/intervals.md#top-k-caps) are only
assumed for the rollout list.

Checked against the truth (the TV of the generating pair), against an LP over every completion consistent with the
data (validity on the real vocabulary, equality on a large one: the capped minimum is exact), and in certify_file
(the record that used to be DATA_ERROR "sampled token more likely than the K-th listed token")."""

import math

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certify_helpers import random_pair, topk_view
from test_interval_lp_crosscheck import lp_min_tv
from workers.certify.file import certify_file
from workers.certify.intervals import ERR_SAMPLED_ABOVE_CAP, DataError, tv_interval

L = math.log


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), N=st.integers(3, 9), extra=st.integers(0, 3))
def test_trainer_values_on_rollout_ids_are_sound_and_exact(seed, N, extra):
    rng = np.random.default_rng(seed)
    p, q = random_pair(rng, N)
    y = int(rng.choice(N, p=p))
    pi, pl = topk_view(p, int(rng.integers(0, N)))
    more = [int(i) for i in rng.permutation(N) if int(i) not in pi][:extra]
    qi = [int(i) for i in rng.permutation(pi + more)]  # any order, not the trainer's top-K
    ql = [math.log(q[i]) for i in qi]
    lo, hi = tv_interval(pi, pl, qi, ql, y, L(p[y]), L(q[y]), topk_caps=(True, False))
    tv = 0.5 * np.abs(p - q).sum()
    assert lo - 1e-12 <= tv <= hi + 1e-12
    known_p = {i: p[i] for i in pi} | {y: p[y]}
    known_q = {i: q[i] for i in qi} | {y: q[y]}
    cap_p = min(p[i] for i in pi) if pi else None
    assert lo <= lp_min_tv(N, known_p, known_q, cap_p, None) + 1e-9  # valid on the real vocabulary
    assert lo == pytest.approx(lp_min_tv(N + 60, known_p, known_q, cap_p, None), abs=1e-8)  # and the exact minimum


# p and q over 6 ids; the rollout's top-2 is {0, 1}; the sampled token 2 is far more likely under the trainer than
# the trainer's values on the rollout's ids (0.6 vs 0.1, 0.1): legal in fcr/1, not a trainer top-2.
P6 = [0.5, 0.3, 0.1, 0.05, 0.03, 0.02]
Q6 = [0.1, 0.1, 0.6, 0.1, 0.05, 0.05]
TRUE_TV = 0.5 * sum(abs(a - b) for a, b in zip(P6, Q6))


def test_single_position_per_side_caps():
    args = ([0, 1], [L(0.5), L(0.3)], [1, 0], [L(0.1), L(0.1)], 2, L(0.1), L(0.6))
    with pytest.raises(DataError) as exc:  # declared a trainer top-2, the data contradict it
        tv_interval(*args)
    assert exc.value.flags & ERR_SAMPLED_ABOVE_CAP
    lo, hi = tv_interval(*args, topk_caps=(True, False))
    assert lo <= TRUE_TV <= hi
    lp = lp_min_tv(6, {0: 0.5, 1: 0.3, 2: 0.1}, {0: 0.1, 1: 0.1, 2: 0.6}, 0.3, None)
    assert lo <= lp + 1e-9 and lo == pytest.approx(
        lp_min_tv(66, {0: 0.5, 1: 0.3, 2: 0.1}, {0: 0.1, 1: 0.1, 2: 0.6}, 0.3, None), abs=1e-8
    )


def record(call_id, roll_top, train_top, y=2, a=L(0.1), b=L(0.6)):
    return {
        "schema": "fcr/1",
        "step": 1,
        "call_id": call_id,
        "trajectory_id": call_id,
        "role": "policy",
        "response": {"token_ids": [y]},
        "rollout": {"logprobs": [a], "top_k": [roll_top]},
        "trainer": {"logprobs": [b], "top_k": [train_top]},
    }


def test_certify_file_accepts_trainer_list_that_is_not_its_top_k(tmp_path):
    recs = [
        record("ok", [[0, L(0.5)], [1, L(0.3)]], [[1, L(0.1)], [0, L(0.1)]]),  # ascending, not top-K
        record("more", [[0, L(0.5)], [1, L(0.3)]], [[0, L(0.1)], [5, L(0.05)], [1, L(0.1)]]),  # extra id, any order
        # the rollout list is still a top-K list: a sampled token above its K-th entry is a data error
        record("bad", [[0, L(0.5)], [1, L(0.3)]], [[0, L(0.1)], [1, L(0.1)]], a=L(0.4)),
    ]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    sink = []
    cert = certify_file(path, precision="exact", sequence_sink=sink.extend)
    seqs = {d["call_id"]: d for d in sink}
    for cid in ("ok", "more"):
        assert seqs[cid]["status"] != "DATA_ERROR", seqs[cid]
        assert seqs[cid]["tv_lo_max"] <= TRUE_TV <= seqs[cid]["eps_hat"]
    known_q = {0: 0.1, 1: 0.1, 2: 0.6}
    assert seqs["ok"]["tv_lo_max"] == pytest.approx(
        lp_min_tv(66, {0: 0.5, 1: 0.3, 2: 0.1}, known_q, 0.3, None), abs=1e-8
    )
    assert seqs["more"]["tv_lo_max"] <= lp_min_tv(6, {0: 0.5, 1: 0.3, 2: 0.1}, known_q | {5: 0.05}, 0.3, None) + 1e-9
    assert seqs["bad"]["status"] == "DATA_ERROR" and "K-th" in seqs["bad"]["reason"]
    assert cert["summary"]["data_errors"] == 1
    assert any("arbitrary subset" in c for c in cert["caveats"])
