"""Training-step audit: the numerics plumbing really changes the rollout, the top-K certificate contains the exact
values and never certifies a smaller B*, one step per loss records its mask; JSON-safe output; CLI."""

import io
import json
import math
from contextlib import redirect_stdout

import pytest
import torch

from workers.training.audit import audit
from workers.jsonsafe import json_safe
from workers.training.cli import main
from workers.training.model import ModelConfig, build_model, sample, trainer_logp
from workers.training.task import copy_reward, group_advantages

CFG = ModelConfig(vocab=16, d_model=32, n_layers=1, n_heads=2, max_len=32, seed=3)


def test_model_is_seeded_and_trainer_matches_fp32_rollout():
    a, b = build_model(CFG), build_model(CFG)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 16, (4, 3), generator=g)
    toks, roll = sample(a, prompts, 5, numerics="fp32", gen=g)
    assert toks.shape == (4, 8) and roll.shape == (4, 5, 16)
    with torch.no_grad():
        tr = trainer_logp(a, toks, 3, dtype=torch.float64)
    # fp32 decode vs fp32 prefill: same maths up to fp32 summation order
    assert float((roll.exp() - tr.exp()).abs().max()) < 1e-5
    _, roll_bf = sample(a, prompts, 5, numerics="bf16_weights", gen=torch.Generator().manual_seed(0))
    tv_bf = 0.5 * (roll_bf.exp() - tr.exp()).abs().sum(-1)
    assert float(tv_bf.mean()) > 1e-4  # bf16 weights give a visible mismatch


def test_reward_and_advantages():
    prompts = torch.tensor([[1, 2], [3, 4]])
    resp = torch.tensor([[1, 2, 1, 0], [0, 0, 0, 0]])
    assert copy_reward(prompts, resp).tolist() == [0.75, 0.0]
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5], dtype=torch.float64), 2)
    assert adv.tolist() == [0.5, -0.5, 0.0, 0.0]


@pytest.fixture(scope="module")
def small_audit():
    return audit(
        batch=8,
        group=4,
        length=6,
        topk=4,
        cfg=CFG,
        numerics="bf16_autocast",
        losses=["ppo", "dppo_binary_tv", "cdppo", "cdppo_budget", "trm_max_kl", "trm_k2max"],
        thresholds=(0.15, 0.002),
    )


def test_audit_json_safe_and_certificates_consistent(small_audit):
    res = small_audit
    json.dumps(json_safe(res), allow_nan=False)
    assert res["divergence"]["tv"]["max"] > 0
    for view in res["certificates"].values():
        assert view["topk"]["contains_exact"] == 1.0  # every exact TV inside its certified interval
        assert view["topk"]["data_errors"] == 0
        assert (
            view["topk"]["kl_upper_finite_share"] == 0.0
        )  # docs/intervals.md#kl-bounds: no KL upper bound from top-K lists
        seq = view["sequence"]
        b_ex, b_tk = seq["exact_kl_mode"]["bounds"], seq["topk_tv_mode"]["bounds"]
        assert "pm_kl" in b_ex and "pm_kl" not in b_tk
        assert b_ex["best"] <= b_tk["best"] + 1e-15
        for row in view["by_threshold"]:
            # a certified OUT is really out (exact TV > θ); shares add up
            assert row["topk_out_share"] <= row["exact_out_share"] + 1e-12
            assert math.isclose(row["topk_in_share"] + row["topk_out_share"] + row["topk_undetermined_share"], 1.0)


def test_audit_records_masks_per_loss(small_audit):
    steps = small_audit["steps"]
    assert set(steps) == {"ppo", "dppo_binary_tv", "cdppo", "cdppo_budget", "trm_max_kl", "trm_k2max"}
    for s in steps.values():
        assert 0.0 <= s["masked_fraction"] <= 1.0 and math.isfinite(s["grad_norm"])
    # bf16 mismatch (TV ~1e-3) is far below DPPO's 0.15: nothing masked; TRM-Max δ=0.05 accepts everything
    assert steps["dppo_binary_tv"]["masked_fraction"] == 0.0
    assert steps["trm_max_kl"]["sequences_rejected"] == 0
    # C-DPPO masks only what it cannot certify: never fewer tokens than DPPO
    assert steps["cdppo"]["masked_tokens"] >= steps["dppo_binary_tv"]["masked_tokens"]
    agree = small_audit["dppo_vs_cdppo_masks"]
    assert agree["cdppo_only_keeps"] == 0


def test_cli_audit_json():
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(
            [
                "audit",
                "--batch",
                "4",
                "--length",
                "3",
                "--topk",
                "2",
                "--json",
                "--numerics",
                "fp32",
                "--losses",
                "ppo,cdppo",
            ]
        )
    assert rc == 0
    res = json.loads(buf.getvalue())
    assert res["schema"] == "training-audit/1" and res["device"] == "cpu"
    assert res["divergence"]["tv"]["max"] < 1e-5 and set(res["steps"]) == {"ppo", "cdppo"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_audit_on_cuda():
    res = audit(device="cuda", batch=8, group=4, length=6, topk=4, cfg=CFG, losses=["dppo_binary_tv", "cdppo"])
    assert res["device"] == "cuda" and res["certificates"]["K=4"]["topk"]["contains_exact"] == 1.0
