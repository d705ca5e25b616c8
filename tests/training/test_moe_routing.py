"""Routing ground truth from a small MoE model: sampled under bf16, recomputed in fp32 with and without rollout
routing replay. The audit's flip rates must equal the ones computed here independently (router logits captured by
hooks, top-k sets compared one by one), a replay with one corrupted layer must fail closed naming it, and the
attribution split must sum to the run's totals."""

import math

import numpy as np
import pytest
import torch

from workers.routing import RoutingAudit, TokenMetrics
from workers.training.model import rollout_logits_fn
from workers.training.moe import MoEConfig, build_moe_model, routing_experiment

CFG = MoEConfig()
B, P, T = 8, 4, 16


@pytest.fixture(scope="module")
def exp():
    return routing_experiment(CFG, batch=B, prompt_len=P, length=T)


@pytest.fixture(scope="module")
def flips(exp):
    return np.array(_independent_flips(exp["tokens"]))  # [B, T, layers]


def _router_logits(model, fn, tokens):
    """Router logits of every layer for ``tokens``, captured by forward hooks (not through the model's own route
    recording)."""
    got = []
    hooks = [b.moe.router.register_forward_hook(lambda m, i, o: got.append(o.detach().float())) for b in model.blocks]
    try:
        with torch.no_grad():
            fn(tokens)
    finally:
        for h in hooks:
            h.remove()
    return got  # one [B, L, E] per layer


def _independent_flips(tokens):
    """flips[b][t][layer] (bool) between bf16 decode-step routing and the fp32 recompute, from hooked logits."""
    model = build_moe_model(CFG)
    toks = torch.as_tensor(tokens)
    k = CFG.top_k
    trainer = _router_logits(model, lambda x: model(x, "math"), toks[:, :-1])
    f, _ = rollout_logits_fn(model, "bf16_autocast")
    flips = [[[False] * CFG.n_layers for _ in range(T)] for _ in range(B)]
    for t in range(T):
        roll = _router_logits(model, f, toks[:, : P + t])
        for layer in range(CFG.n_layers):
            for b in range(B):
                r = set(torch.topk(roll[layer][b, -1], k).indices.tolist())
                s = set(torch.topk(trainer[layer][b, P - 1 + t], k).indices.tolist())
                flips[b][t][layer] = r != s
    return flips


def _audit(exp, trainer_key, replay, logp_key="trainer_logp", tv_key="tv"):
    a = RoutingAudit(min_flipped_layers=2)
    for b in range(B):
        dlp = np.abs(exp[logp_key][b] - exp["rollout_logp"][b])
        a.add_call(
            f"seq-{b}",
            rollout=exp["rollout_routes"][b],
            trainer=exp[trainer_key][b],
            replay=replay,
            n_experts=CFG.n_experts,
            n_tokens=T,
            metrics=TokenMetrics(
                tv_hi=exp[tv_key][b], tv_lo=exp[tv_key][b], abs_dlogp=dlp, accepted=exp[tv_key][b] < 0.05
            ),
        )
    return a.result()


def test_flip_rates_equal_independently_computed_ones(exp, flips):
    res = _audit(exp, "trainer_routes", "none")
    assert res["pairs_verified"] == B * T * CFG.n_layers and res["coverage"]["tokens"] == 1.0
    assert res["pairs_flipped"] == int(flips.sum()) > 0  # bf16 vs fp32 does flip routes in this model
    assert res["flip_rate"] == flips.sum() / flips.size
    assert [row["flipped"] for row in res["per_layer"]] == flips.sum((0, 1)).tolist()
    assert res["per_position"]["flipped"] == flips.sum((0, 2)).tolist()
    assert res["tokens_flipped"] == int(flips.any(2).sum())
    assert res["token_flip_share"] == flips.any(2).mean()
    assert res["replay"]["state"] == "NOT_DECLARED"


def test_replay_reproduces_rollout_routes_and_passes(exp):
    assert (exp["replayed_routes"] == exp["rollout_routes"]).all()
    res = _audit(exp, "replayed_routes", "R3", "replay_logp", "tv_replay")
    assert res["replay"]["state"] == "PASS" and res["replay"]["verified_calls"] == B
    assert res["pairs_flipped"] == 0 and res["tokens_agree"] == B * T


def test_r3_with_one_corrupted_replayed_layer_fails_closed_naming_it(exp):
    model = build_moe_model(CFG)
    toks = torch.as_tensor(exp["tokens"])
    full = []
    with torch.no_grad():
        model(toks[:, :-1], "math", routes_out=full)  # a replay source for every position …
    replay = full[0].clone()
    replay[:, P - 1 :] = torch.as_tensor(exp["rollout_routes"])  # … the rollout's at response positions
    bad_seq, bad_layer = 5, 2
    replay[bad_seq, P - 1 + 3, bad_layer] = (replay[bad_seq, P - 1 + 3, bad_layer] + 1) % CFG.n_experts
    if len(set(replay[bad_seq, P - 1 + 3, bad_layer].tolist())) < CFG.top_k:  # keep the selection valid
        replay[bad_seq, P - 1 + 3, bad_layer, 0] = (replay[bad_seq, P - 1 + 3, bad_layer, 1] + 1) % CFG.n_experts
    used = []
    with torch.no_grad():
        model(toks[:, :-1], "math", replay=replay, routes_out=used)  # the trainer records what it actually used
    corrupted = dict(exp, trainer_routes=used[0][:, P - 1 :].numpy())
    res = _audit(corrupted, "trainer_routes", "R3")
    v = res["replay"]
    assert v["state"] == "FAIL" and v["failed_calls"] == 1 and v["verified_calls"] == B - 1
    assert v["failed"] == [{"call_id": f"seq-{bad_seq}", "pairs_flipped": 1, "layers_flipped": [bad_layer]}]
    assert v["failed_layers"] == [bad_layer]


def test_attribution_split_sums_to_run_totals_and_flips_carry_the_divergence(exp, flips):
    res = _audit(exp, "trainer_routes", "none")
    att = res["attribution"]
    parts = [att[g] for g in ("agree", "flipped", "unverifiable")]
    assert sum(p["tokens"] for p in parts) == B * T == att["all"]["tokens"]
    assert sum(p.get("acceptance", {}).get("accepted", 0) for p in parts) == int((exp["tv"] < 0.05).sum())
    for key, ref in (("tv_hi", exp["tv"]), ("abs_dlogp", np.abs(exp["trainer_logp"] - exp["rollout_logp"]))):
        total = math.fsum(ref.ravel().tolist())
        assert math.isclose(att["all"][key]["sum"], total, rel_tol=1e-15)
        assert math.isclose(math.fsum(p[key]["sum"] for p in parts if key in p), total, rel_tol=1e-15)
    flipped = flips.any(2)
    assert att["flipped"]["tv_hi"]["sum"] == pytest.approx(exp["tv"][flipped].sum(), rel=1e-12)
    assert att["all"]["eps_hat"] == exp["tv"].max()
    # the model's flips are where the divergence is: a few percent of the tokens, far more of the TV
    assert att["flipped_share"]["tv_hi"] > 5 * res["token_flip_share"]
