"""Validated configuration of one training-step audit job (no torch, no Django: the web tier validates a submission
with it, the worker validates again before running).

:func:`validate` turns a user's mapping (JSON numbers or form strings) into a complete, normalised config or raises
:class:`ConfigError` naming the field. :func:`choose_device` decides where a validated config runs given whether the
worker has CUDA: ``auto`` uses CUDA when present and falls back to CPU; ``cuda`` falls back to CPU only when the
config fits the CPU limits; ``cpu`` always runs on CPU.
"""

from __future__ import annotations

import math

PRECISIONS = ("fp32", "bf16_autocast", "bf16_weights")
OPTIONS = ("sdpa", "extra_batch")
LOSS_NAMES = (
    "ppo",
    "grpo",
    "tis",
    "seq_mis",
    "icepop",
    "cispo",
    "dppo_binary_tv",
    "dppo_binary_kl",
    "dppo_topk_tv",
    "dppo_topk_kl",
    "trm_max_kl",
    "trm_max_avg_kl",
    "trm_k2max",
    "cdppo",
    "cdppo_budget",
)
DEVICES = ("auto", "cuda", "cpu")
OPTIMIZERS = ("sgd", "adam")

# field: (default, min, max). Model fields first (they fix the seeded weights), then the batch.
INT_FIELDS = {
    "vocab": (32, 2, 65536),
    "d_model": (64, 2, 4096),
    "n_layers": (2, 1, 48),
    "n_heads": (4, 1, 64),
    "max_len": (64, 2, 4096),
    "seed": (0, 0, 2**31 - 1),
    "batch": (16, 1, 1024),
    "group": (4, 1, 256),
    "prompt_len": (4, 1, 2048),
    "length": (16, 1, 2048),
    "topk": (8, 1, 65536),
}
FLOAT_FIELDS = {"lr": (1.0, 0.0, 1e3), "budget": (0.5, 0.0, 1e6)}  # both exclusive at 0
DEFAULTS = {
    **{k: v[0] for k, v in INT_FIELDS.items()},
    **{k: v[0] for k, v in FLOAT_FIELDS.items()},
    "numerics": "bf16_autocast",
    "optimizer": "sgd",
    "device": "auto",
    "losses": list(LOSS_NAMES),
    "prompts": None,
}

# What a CPU worker (the fallback) accepts, and what any worker accepts. ``work`` ≈ parameters × tokens pushed
# through the model (decode without a cache re-reads the prefix; 15 losses × forward, backward, forward); on one
# CPU thread about 1.5·10¹⁰ per second (measured: V=1024, d=256, 4 layers, B=16, T=32 → 1.4·10¹¹ in 11 s).
CPU_LIMITS = {"params": 20_000_000, "work": 6e11, "logits": 2e7}
GPU_LIMITS = {"params": 2_000_000_000, "work": 5e15, "logits": 2e8}


class ConfigError(ValueError):
    """A bad field: ``field`` names it, the message says why."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_numerics(numerics) -> dict:
    """``"bf16_autocast,sdpa"`` → ``{"precision", "attn", "extra_batch"}``; ConfigError on anything unknown."""
    if not isinstance(numerics, str):
        raise ConfigError("numerics", f"must be a string such as 'bf16_autocast,sdpa', not {type(numerics).__name__}")
    parts = [p.strip() for p in numerics.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PRECISIONS + OPTIONS]
    if unknown:
        raise ConfigError(
            "numerics",
            f"unknown rollout numerics {', '.join(map(repr, unknown))}; use one of "
            f"{', '.join(PRECISIONS)} plus optionally {', '.join(OPTIONS)}",
        )
    precision = [p for p in parts if p in PRECISIONS]
    if len(precision) > 1:
        raise ConfigError("numerics", f"give at most one precision, got {', '.join(precision)}")
    if len(set(parts)) != len(parts):
        raise ConfigError("numerics", "an option is repeated")
    return {
        "precision": precision[0] if precision else "fp32",
        "attn": "sdpa" if "sdpa" in parts else "math",
        "extra_batch": "extra_batch" in parts,
    }


def _int(field, value):
    if isinstance(value, bool):
        raise ConfigError(field, "must be an integer, not a boolean")
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("-").isdigit():
            raise ConfigError(field, f"must be an integer, got {value!r}")
        value = int(text)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise ConfigError(field, f"must be an integer, got {value!r}")
    lo, hi = INT_FIELDS[field][1:]
    if value < lo:
        raise ConfigError(field, f"must be at least {lo}, got {value}")
    if value > hi:
        raise ConfigError(field, f"must be at most {hi}, got {value}")
    return value


def _float(field, value):
    if isinstance(value, bool):
        raise ConfigError(field, "must be a number, not a boolean")
    try:
        value = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ConfigError(field, f"must be a number, got {value!r}") from None
    lo, hi = FLOAT_FIELDS[field][1:]
    if not math.isfinite(value) or value <= lo or value > hi:
        raise ConfigError(field, f"must be a finite number in ({lo:g}, {hi:g}], got {value!r}")
    return value


def _losses(value):
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError("losses", "must be a list of loss names (or a comma-separated string)")
    unknown = [v for v in value if v not in LOSS_NAMES]
    if unknown:
        raise ConfigError("losses", f"unknown loss {', '.join(map(repr, unknown))}; known: {', '.join(LOSS_NAMES)}")
    if not value:
        raise ConfigError("losses", "name at least one loss")
    return [n for n in LOSS_NAMES if n in value]  # canonical order, no repeats


def _prompts(value, vocab):
    """Explicit prompts: a list of equally long token-id lists (each id < vocab), or None for seeded prompts."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):  # the form: one prompt per line, ids separated by spaces or commas
        rows = [line.replace(",", " ").split() for line in value.splitlines() if line.strip()]
        try:
            value = [[int(t) for t in row] for row in rows]
        except ValueError:
            raise ConfigError("prompts", "one prompt per line, token ids separated by spaces or commas") from None
    if not isinstance(value, list) or not all(isinstance(r, list) and r for r in value):
        raise ConfigError("prompts", "must be a list of non-empty lists of token ids")
    if len({len(r) for r in value}) != 1:
        raise ConfigError("prompts", "every prompt must have the same length (the batch has no padding)")
    for i, row in enumerate(value):
        for t in row:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
                raise ConfigError("prompts", f"prompt {i + 1}: token ids must be integers in [0, {vocab}), got {t!r}")
    return value


def validate(data: dict | None) -> dict:
    """A complete normalised config from ``data`` (missing fields take their defaults); ConfigError otherwise."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("config", "must be an object")
    unknown = sorted(set(data) - set(DEFAULTS))
    if unknown:
        raise ConfigError(unknown[0], f"unknown field; known fields: {', '.join(DEFAULTS)}")
    raw = {k: (DEFAULTS[k] if data.get(k) in (None, "") else data[k]) for k in DEFAULTS}
    cfg = {k: _int(k, raw[k]) for k in INT_FIELDS}
    cfg.update({k: _float(k, raw[k]) for k in FLOAT_FIELDS})
    parse_numerics(raw["numerics"])
    cfg["numerics"] = ",".join(p.strip() for p in raw["numerics"].split(",") if p.strip()) or "fp32"
    for field, choices in (("optimizer", OPTIMIZERS), ("device", DEVICES)):
        if raw[field] not in choices:
            raise ConfigError(field, f"must be one of {', '.join(choices)}, got {raw[field]!r}")
        cfg[field] = raw[field]
    cfg["losses"] = _losses(raw["losses"])
    cfg["prompts"] = _prompts(raw["prompts"], cfg["vocab"])
    if cfg["d_model"] % cfg["n_heads"]:
        raise ConfigError("n_heads", f"must divide d_model ({cfg['d_model']}), got {cfg['n_heads']}")
    if cfg["prompts"] is not None:
        cfg["prompt_len"] = len(cfg["prompts"][0])
        cfg["batch"] = len(cfg["prompts"]) * cfg["group"]
        if cfg["batch"] > INT_FIELDS["batch"][2]:
            raise ConfigError(
                "prompts",
                f"{len(cfg['prompts'])} prompts × group {cfg['group']} exceeds the batch "
                f"limit of {INT_FIELDS['batch'][2]}",
            )
    elif cfg["batch"] % cfg["group"]:
        raise ConfigError("batch", f"must be a multiple of group ({cfg['group']}), got {cfg['batch']}")
    if cfg["prompt_len"] + cfg["length"] > cfg["max_len"]:
        raise ConfigError(
            "length",
            f"prompt_len + length ({cfg['prompt_len']} + {cfg['length']}) exceeds the "
            f"model's max_len ({cfg['max_len']})",
        )
    if cfg["topk"] > cfg["vocab"]:
        raise ConfigError("topk", f"must be at most vocab ({cfg['vocab']}), got {cfg['topk']}")
    over = exceeds(cfg, GPU_LIMITS if cfg["device"] == "cuda" else CPU_LIMITS)
    if over:
        where = (
            "any worker"
            if cfg["device"] == "cuda"
            else "the CPU fallback (ask for device 'cuda' to run it on a GPU worker)"
        )
        raise ConfigError(over[0], f"{over[1]} — too large for {where}")
    return cfg


def cost(cfg: dict) -> dict:
    """Parameters, work (parameters × tokens through the model) and the largest full-vocabulary tensor."""
    V, d, L, n = cfg["vocab"], cfg["d_model"], cfg["n_layers"], cfg["max_len"]
    params = 2 * V * d + n * d + L * (12 * d * d + 13 * d) + V
    B, P, T = cfg["batch"], cfg["prompt_len"], cfg["length"]
    rows = 2 * B if "extra_batch" in cfg["numerics"] else B
    decode = rows * (P * T + T * (T + 1) / 2)
    steps = 3 * (len(cfg["losses"]) + 1) * B * (P + T)
    return {"params": params, "work": float(params) * (decode + steps), "logits": B * T * V}


def exceeds(cfg: dict, limits: dict) -> tuple[str, str] | None:
    """The first limit the config exceeds, as (field to blame, explanation), or None."""
    c = cost(cfg)
    if c["params"] > limits["params"]:
        return "d_model", f"the model has {c['params']:,} parameters (limit {limits['params']:,})"
    if c["logits"] > limits["logits"]:
        return "batch", (
            f"batch × length × vocab = {c['logits']:,} full-vocabulary log-probs per view "
            f"(limit {int(limits['logits']):,})"
        )
    if c["work"] > limits["work"]:
        return "length", f"about {c['work']:.2g} parameter-token operations (limit {limits['work']:.2g})"
    return None


def choose_device(cfg: dict, cuda_available: bool) -> tuple[str | None, str]:
    """(device to run on, note) for a validated config; device None means it cannot run on this worker."""
    if cfg["device"] == "cpu":
        return "cpu", "CPU requested"
    if cuda_available:
        return "cuda", "CUDA available"
    over = exceeds(cfg, CPU_LIMITS)
    if over:
        return None, f"no CUDA on this worker and {over[1]}: too large for the CPU fallback"
    return "cpu", "no CUDA on this worker: CPU fallback"
