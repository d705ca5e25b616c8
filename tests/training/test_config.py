"""The audit-job configuration (torch-free validation shared by the portal and the worker), device choice, and the
engine hooks the portal uses: explicit prompts, progress, the per-position profile and the per-token arrays."""

import subprocess
import sys

import pytest

from workers.training import audit as audit_mod
from workers.training.config import (
    CPU_LIMITS,
    DEFAULTS,
    GPU_LIMITS,
    LOSS_NAMES,
    ConfigError,
    choose_device,
    exceeds,
    validate,
)

TINY = {
    "vocab": 16,
    "d_model": 16,
    "n_layers": 1,
    "n_heads": 2,
    "max_len": 16,
    "batch": 4,
    "group": 2,
    "prompt_len": 3,
    "length": 6,
    "topk": 4,
}
GPU_BENCH = {
    **TINY,
    "vocab": 8192,
    "d_model": 512,
    "n_layers": 4,
    "n_heads": 8,
    "max_len": 80,
    "batch": 32,
    "group": 4,
    "length": 64,
    "topk": 20,
}


def test_config_module_is_torch_free():
    out = subprocess.run(
        [sys.executable, "-c", "import sys, workers.training.config; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "False", out.stderr


def test_loss_names_are_the_audits_losses():
    assert set(LOSS_NAMES) == set(audit_mod._loss_specs())


def test_defaults_are_the_engines_defaults_and_map_back_to_the_same_audit():
    cfg = validate({"losses": ["ppo"]})
    assert {k: cfg[k] for k in ("batch", "group", "prompt_len", "length", "topk", "lr", "budget", "numerics")} == {
        "batch": 16,
        "group": 4,
        "prompt_len": 4,
        "length": 16,
        "topk": 8,
        "lr": 1.0,
        "budget": 0.5,
        "numerics": "bf16_autocast",
    }
    small = validate({**TINY, "losses": "ppo, cdppo"})
    assert small["losses"] == ["ppo", "cdppo"]
    via_config = audit_mod.audit_config(small, "cpu")
    direct = audit_mod.audit(
        batch=4,
        group=2,
        prompt_len=3,
        length=6,
        topk=4,
        losses=["ppo", "cdppo"],
        cfg=audit_mod.ModelConfig(vocab=16, d_model=16, n_layers=1, n_heads=2, max_len=16),
    )
    assert via_config["divergence"] == direct["divergence"] and via_config["steps"] == direct["steps"]


def test_form_strings_are_coerced():
    cfg = validate(
        {
            "vocab": " 16 ",
            "d_model": "16",
            "n_heads": "2",
            "lr": "0.5",
            "prompts": "1 2 3\n4,5,6",
            "group": "2",
            "max_len": "16",
            "length": "6",
            "topk": "4",
            "batch": "",
        }
    )
    assert cfg["vocab"] == 16 and cfg["lr"] == 0.5 and cfg["prompts"] == [[1, 2, 3], [4, 5, 6]]
    assert cfg["prompt_len"] == 3 and cfg["batch"] == 4  # derived from the prompts and the group


@pytest.mark.parametrize(
    "data, field",
    [
        ({"numerics": "bf16"}, "numerics"),
        ({"numerics": "sdpa,sdpa"}, "numerics"),
        ({"numerics": 3}, "numerics"),
        ({"batch": -1}, "batch"),
        ({"batch": 6, "group": 4}, "batch"),
        ({"group": 0}, "group"),
        ({"vocab": True}, "vocab"),
        ({"vocab": 1.5}, "vocab"),
        ({"seed": -3}, "seed"),
        ({"d_model": 30, "n_heads": 4}, "n_heads"),
        ({"length": 100}, "length"),
        ({"topk": 64}, "topk"),
        ({"lr": 0}, "lr"),
        ({"lr": "inf"}, "lr"),
        ({"budget": -1}, "budget"),
        ({"optimizer": "lion"}, "optimizer"),
        ({"losses": []}, "losses"),
        ({"losses": ["ppo", 3]}, "losses"),
        ({"prompts": [[1, 2], [3]]}, "prompts"),
        ({"prompts": [[1, 99]]}, "prompts"),
        ({"prompts": "1 x"}, "prompts"),
        ({"tokenizer": "gpt2"}, "tokenizer"),
    ],
)
def test_each_bad_field_is_named(data, field):
    with pytest.raises(ConfigError) as info:
        validate(data)
    assert info.value.field == field and str(info.value).startswith(f"{field}: ")


def test_limits_and_device_choice():
    assert exceeds(validate({}), CPU_LIMITS) is None
    with pytest.raises(ConfigError, match="CPU fallback"):
        validate(GPU_BENCH)
    big = validate({**GPU_BENCH, "device": "cuda"})
    assert exceeds(big, GPU_LIMITS) is None and exceeds(big, CPU_LIMITS)[0] == "d_model"
    assert choose_device(big, True) == ("cuda", "CUDA available")
    device, note = choose_device(big, False)
    assert device is None and "too large for the CPU fallback" in note
    small = validate({**TINY, "device": "cuda"})
    assert choose_device(small, False) == ("cpu", "no CUDA on this worker: CPU fallback")
    assert choose_device(validate({**TINY, "device": "cpu"}), True) == ("cpu", "CPU requested")
    assert choose_device(validate(TINY), True)[0] == "cuda"
    assert set(DEFAULTS) >= {"device", "numerics", "prompts", "losses"}


def test_explicit_prompts_progress_profile_and_arrays():
    seen = []
    cfg = validate(
        {
            **TINY,
            "prompts": [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],
            "max_len": 16,
            "losses": ["ppo", "trm_max_kl"],
        }
    )
    res = audit_mod.audit_config(cfg, "cpu", progress=lambda f, m: seen.append((f, m)), arrays=True)
    assert res["batch"] == 6 and res["prompt_len"] == 4
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and seen[-1][1] == "optimiser step 2/2: trm_max_kl"
    arr, prof = res["arrays"], res["profile"]
    assert len(arr["tv"]) == 6 and all(len(r) == 6 for r in arr["tv"])
    tv = [v for r in arr["tv"] for v in r]
    assert sum(tv) / len(tv) == pytest.approx(res["divergence"]["tv"]["mean"])
    assert all(lo - 1e-12 <= t <= hi + 1e-12 for t, lo, hi in zip(tv, sum(arr["topk_lo"], []), sum(arr["topk_hi"], [])))
    assert sum(prof["tv_histogram"]["counts"]) + prof["tv_histogram"]["zeros"] == 36
    assert len(prof["position"]["tv_mean"]) == 6 and prof["K"] == 4
    assert max(prof["position"]["tv_max"]) == pytest.approx(max(tv))
    for t in range(6):
        col = [arr["tv"][b][t] for b in range(6)]
        assert prof["position"]["tv_mean"][t] == pytest.approx(sum(col) / 6)
    other = audit_mod.audit_config(
        {**cfg, "prompts": [[4, 3, 2, 1], [8, 7, 6, 5], [12, 11, 10, 9]]}, "cpu", arrays=True
    )
    assert other["arrays"]["tokens"] != arr["tokens"]  # the prompts condition the rollouts
    with pytest.raises(ValueError):
        audit_mod.audit(prompts=[[1, 99]], cfg=audit_mod.ModelConfig(vocab=16, d_model=16, n_layers=1, n_heads=2))
