"""The routing audit engine: flip rates against a loop-by-loop reference, order ignored, coverage never assumed,
the R3 verdict, the attribution partition, and bad routes refused with the call and the reason."""

import math

import numpy as np
import pytest

from tests.routing.reference import reference_audit
from workers.routing import RoutingAudit, RoutingDataError, TokenMetrics


def _random_calls(rng, n_calls=12, L=5, K=3, E=16, flip=0.1, miss=0.05):
    calls = []
    for i in range(n_calls):
        T = int(rng.integers(1, 40))
        r = np.stack([[rng.permutation(E)[:K] for _ in range(L)] for _ in range(T)])
        t = r.copy()
        # flips: replace one or two experts with others not in the set; shuffles: same set, other order
        for tt in range(T):
            for layer in range(L):
                u = rng.random()
                if u < flip:
                    others = [e for e in range(E) if e not in r[tt, layer]]
                    k = int(rng.integers(1, 3))
                    t[tt, layer, :k] = rng.choice(others, k, replace=False)
                elif u < 2 * flip:
                    t[tt, layer] = rng.permutation(t[tt, layer])
                if rng.random() < miss:
                    (r if rng.random() < 0.5 else t)[tt, layer] = -1
        calls.append({"call_id": f"c{i}", "rollout": r, "trainer": t, "metric": rng.exponential(0.05, T)})
    return calls


def test_flip_rates_match_reference_and_order_is_ignored():
    rng = np.random.default_rng(7)
    calls = _random_calls(rng)
    a = RoutingAudit(min_flipped_layers=2)
    for c in calls:
        a.add_call(
            c["call_id"],
            rollout=c["rollout"],
            trainer=c["trainer"],
            replay="none",
            metrics=TokenMetrics(abs_dlogp=c["metric"]),
        )
    res = a.result()
    ref = reference_audit([{k: (v.tolist() if k != "call_id" else v) for k, v in c.items()} for c in calls], N=2)
    assert res["pairs_verified"] == ref["pairs_verified"] and res["pairs_flipped"] == ref["pairs_flipped"]
    assert 0 < res["pairs_flipped"] < res["pairs_verified"]
    assert res["flip_rate"] == ref["pairs_flipped"] / ref["pairs_verified"]
    for row in res["per_layer"]:
        assert (row["verified"], row["flipped"]) == ref["per_layer"][row["layer"]]
    for pos, (v, f) in ref["per_pos"].items():
        assert res["per_position"]["verified"][pos] == v and res["per_position"]["flipped"][pos] == f
    assert (res["tokens_agree"], res["tokens_flipped"], res["tokens_unverifiable"]) == (
        ref["agree"],
        ref["flipped"],
        ref["unverifiable"],
    )
    assert res["token_flip_share"] == ref["flipped"] / (ref["agree"] + ref["flipped"])
    assert res["tokens_by_flipped_layers"] == [ref["by_n"].get(n, 0) for n in range(6)]
    # the layer × position grid holds the same counts, binned
    grid = res["layer_position_grid"]
    assert np.sum(grid["flipped"]) == res["pairs_flipped"] and np.sum(grid["verified"]) == res["pairs_verified"]
    assert np.sum(grid["flipped"], 1).tolist() == [r["flipped"] for r in res["per_layer"]]
    # attribution partition and the ≥ N row against the reference sums
    att = res["attribution"]
    for g in ("agree", "flipped", "unverifiable"):
        assert att[g]["tokens"] == ref[g]
        assert math.isclose(att[g]["abs_dlogp"]["sum"], ref["sum"][g], rel_tol=1e-12)
    assert att["flipped_ge_n"]["tokens"] == ref["ge_n"] > 0
    assert math.isclose(att["flipped_ge_n"]["abs_dlogp"]["sum"], ref["sum"]["ge_n"], rel_tol=1e-12)


def test_same_set_in_another_order_is_not_a_flip():
    r = np.array([[[1, 2, 3]], [[4, 5, 6]]])
    t = np.array([[[3, 1, 2]], [[6, 4, 5]]])
    a = RoutingAudit()
    a.add_call("c", rollout=r, trainer=t, replay="R3")
    res = a.result()
    assert res["pairs_flipped"] == 0 and res["replay"]["state"] == "PASS"


def test_missing_routes_are_unverifiable_never_agreement():
    r = np.array([[[0, 1]], [[2, 3]]])
    t = np.array([[[0, 1]], [[-1, -1]]])
    a = RoutingAudit()
    a.add_call("c", rollout=r, trainer=t, replay="R3")
    a.add_call("d", rollout=r, trainer=None, replay="R3")
    a.add_call("e", n_tokens=4, replay="none")
    res = a.result()
    assert (res["tokens_agree"], res["tokens_unverifiable"], res["tokens_without_routes"]) == (1, 7, 4)
    assert res["coverage"]["tokens"] == 1 / 8 and res["coverage"]["pairs"] == 1 / 8
    v = res["replay"]
    assert v["state"] == "UNVERIFIABLE" and [c["call_id"] for c in v["unverifiable"]] == ["c", "d"]


def test_r3_with_one_corrupted_layer_fails_closed_naming_call_and_layer():
    rng = np.random.default_rng(1)
    r = np.stack([[rng.permutation(8)[:2] for _ in range(4)] for _ in range(10)])
    a = RoutingAudit()
    a.add_call("ok", rollout=r, trainer=r.copy(), replay="R3")
    bad = r.copy()
    bad[:, 2] = (bad[:, 2] + 1) % 8  # every token's layer 2 shifted to other experts
    a.add_call("bad", rollout=r, trainer=bad, replay="R3")
    a.add_call("r2", rollout=r, trainer=bad, replay="R2")  # flips under R2 are measured, not failed
    v = a.result()["replay"]
    assert v["state"] == "FAIL" and v["failed_calls"] == 1 and v["verified_calls"] == 1
    assert v["failed"] == [{"call_id": "bad", "pairs_flipped": 10, "layers_flipped": [2]}]
    assert "layer(s) 2" in v["reason"]


def test_attribution_partition_sums_to_run_totals():
    rng = np.random.default_rng(3)
    a = RoutingAudit(min_flipped_layers=3)
    calls = _random_calls(rng, n_calls=20, flip=0.2)
    allv = {"tv_hi": [], "tv_lo": [], "abs_dlogp": []}
    acc = 0
    for c in calls:
        T = len(c["metric"])
        tv_hi = rng.uniform(0, 0.3, T)
        m = TokenMetrics(tv_hi=tv_hi, tv_lo=tv_hi * 0.5, abs_dlogp=c["metric"], accepted=tv_hi < 0.2)
        acc += int((tv_hi < 0.2).sum())
        allv["tv_hi"] += tv_hi.tolist()
        allv["tv_lo"] += (tv_hi * 0.5).tolist()
        allv["abs_dlogp"] += c["metric"].tolist()
        a.add_call(c["call_id"], rollout=c["rollout"], trainer=c["trainer"], replay="R2", metrics=m)
    att = a.result()["attribution"]
    parts = [att[g] for g in ("agree", "flipped", "unverifiable")]
    assert sum(p["tokens"] for p in parts) == att["all"]["tokens"] == len(allv["tv_hi"])
    assert sum(p["acceptance"]["accepted"] for p in parts) == att["all"]["acceptance"]["accepted"] == acc
    for k, vals in allv.items():
        total = math.fsum(vals)
        assert math.isclose(att["all"][k]["sum"], total, rel_tol=1e-15)
        assert math.isclose(math.fsum(p[k]["sum"] for p in parts), total, rel_tol=1e-15)
    assert max(p["eps_hat"] for p in parts) == att["all"]["eps_hat"] == max(allv["tv_hi"])
    assert att["flipped_share"]["abs_dlogp"] == att["flipped"]["abs_dlogp"]["sum"] / att["all"]["abs_dlogp"]["sum"]


@pytest.mark.parametrize(
    "rollout, trainer, kw, field, reason",
    [
        ([[1, 2]], None, {}, "rollout.routed_experts", "expected [tokens, layers, top_k]"),
        ([[[1, 1]]], None, {}, "rollout.routed_experts[0][0]", "selected twice"),
        ([[[1, -1]]], None, {}, "rollout.routed_experts[0][0]", "partly recorded"),
        ([[[1, 9]]], None, {"n_experts": 8}, "rollout.routed_experts[0][0]", "expert id 9 out of range"),
        ([[[1.5, 2]]], None, {}, "rollout.routed_experts", "must be integers"),
        ([[[1, 2]], [[3]]], None, {}, "rollout.routed_experts", "not a rectangular"),
        ([[[1, 2]]], [[[1, 2]], [[1, 2]]], {}, "trainer.routed_experts", "2 token rows"),
        ([[[1, 2]]], [[[1, 2, 3]]], {}, "trainer.routed_experts", "differs from the rollout"),
        ([[[1, 2]]], None, {"replay": "R4"}, "trainer.routing_replay", "unknown replay mode"),
    ],
)
def test_bad_routes_are_refused_naming_call_field_and_reason(rollout, trainer, kw, field, reason):
    a = RoutingAudit()
    with pytest.raises(RoutingDataError) as e:
        a.add_call("call-7", rollout=rollout, trainer=trainer, n_tokens=1, **kw)
    assert e.value.call_id == "call-7" and e.value.field == field and reason in str(e.value)


def test_layer_count_and_top_k_constant_within_a_model():
    a = RoutingAudit()
    a.add_call("a", rollout=np.zeros((2, 3, 1), int))
    with pytest.raises(RoutingDataError, match="call 'b'.*2 layers, but earlier calls of this model have 3"):
        a.add_call("b", rollout=np.zeros((2, 2, 1), int))
    # another k (#27): a swap rate over the first call's k was computed for it (and could exceed 1)
    b = RoutingAudit()
    b.add_call("a", rollout=[[[0, 1]]], trainer=[[[0, 1]]])
    with pytest.raises(RoutingDataError, match="call 'c'.*top_k 3, but earlier calls of this model have 2"):
        b.add_call("c", rollout=[[[0, 1, 2]]], trainer=[[[3, 4, 5]]])
    assert b.result()["calls"] == 2 and b.result()["expert_swap_rate"] == 0.0
