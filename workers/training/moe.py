"""A small Mixture-of-Experts causal LM (seeded, randomly initialised, CPU-sized) for routing ground truth
(docs/routing.md, "Ground truth").

The blocks of :class:`~workers.training.model.TinyCausalLM` with the MLP replaced by ``n_experts`` expert MLPs behind
a linear router: each token goes to the ``top_k`` experts with the highest router logits, weighted by the softmax of
those logits over the chosen experts. The forward can record the chosen experts (``routes_out``) and can be forced to
use given ones (``replay``: rollout routing replay, the gate weights still computed from this forward's router logits
over the forced experts, as replaying trainers do).

:func:`routing_experiment` samples under rollout numerics (bf16 by default, decode-style) recording the engine's
routes, then recomputes under trainer numerics (fp32) twice — routing freely, and replaying the rollout's routes —
and returns every per-token quantity the routing audit needs, with the exact full-vocabulary TV of each token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from workers.certify.intervals import exact_tv_kl
from workers.training.model import Block, ModelConfig, TinyCausalLM, sample, trainer_logp


@dataclass(frozen=True)
class MoEConfig(ModelConfig):
    vocab: int = 32
    d_model: int = 32
    n_layers: int = 4
    n_heads: int = 4
    n_experts: int = 8
    top_k: int = 2
    d_expert: int = 32


class MoE(nn.Module):
    def __init__(self, d, n_experts, top_k, hidden):
        super().__init__()
        self.k = top_k
        self.router = nn.Linear(d, n_experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(n_experts, d, hidden) / d**0.5)
        self.w2 = nn.Parameter(torch.randn(n_experts, hidden, d) / hidden**0.5)

    def forward(self, x, replay=None):
        """``x`` [B, L, D] → (output [B, L, D], experts [B, L, top_k]); ``replay`` forces the experts."""
        logits = self.router(x)
        idx = torch.topk(logits, self.k, -1).indices if replay is None else replay
        gate = torch.softmax(logits.float().gather(-1, idx), -1).to(x.dtype)
        h = F.gelu(torch.einsum("bld,edh->bleh", x, self.w1))  # every expert, then the chosen ones (tiny sizes)
        y = torch.einsum("bleh,ehd->bled", h, self.w2)
        y = y.gather(2, idx[..., None].expand(*idx.shape, y.shape[-1]))
        return (y * gate[..., None].to(y.dtype)).sum(2), idx


class MoEBlock(Block):
    def __init__(self, d, h, cfg: MoEConfig):
        super().__init__(d, h)
        del self.mlp
        self.moe = MoE(d, cfg.n_experts, cfg.top_k, cfg.d_expert)

    def forward(self, x, attn="math", replay=None):
        x = self.attend(x, attn)
        y, idx = self.moe(self.ln2(x), replay)
        return x + y, idx


class TinyMoELM(TinyCausalLM):
    def __init__(self, cfg: MoEConfig):
        super().__init__(cfg)
        self.blocks = nn.ModuleList(MoEBlock(cfg.d_model, cfg.n_heads, cfg) for _ in range(cfg.n_layers))

    def forward(self, tokens, attn="math", routes_out: list | None = None, replay: torch.Tensor | None = None):
        """Logits ``[B, L, V]``. ``routes_out``: a list to which the experts chosen, ``[B, L, layers, top_k]``
        (int64), are appended. ``replay``: experts to use instead, same shape."""
        B, L = tokens.shape
        cfg = self.cfg
        if replay is not None and tuple(replay.shape) != (B, L, cfg.n_layers, cfg.top_k):
            raise ValueError(
                f"replay routes have shape {list(replay.shape)}, expected {[B, L, cfg.n_layers, cfg.top_k]}"
            )
        x = self.tok(tokens) + self.pos(torch.arange(L, device=tokens.device))[None]
        chosen = []
        for i, b in enumerate(self.blocks):
            x, idx = b(x, attn, None if replay is None else replay[:, :, i])
            chosen.append(idx)
        if routes_out is not None:
            routes_out.append(torch.stack(chosen, 2))
        return self.head(self.ln(x))


def build_moe_model(cfg: MoEConfig = MoEConfig(), device="cpu") -> TinyMoELM:
    """The MoE model with weights drawn from ``cfg.seed`` (deterministic; fp32)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        m = TinyMoELM(cfg)
        with torch.no_grad():
            m.head.weight.mul_(4.0)
    return m.to(device)


@torch.no_grad()
def routing_experiment(
    cfg: MoEConfig = MoEConfig(),
    *,
    batch: int = 8,
    prompt_len: int = 4,
    length: int = 16,
    numerics: str = "bf16_autocast",
    sample_seed: int = 0,
) -> dict:
    """Sample under ``numerics``, recompute in fp32 with and without replay. Every array is numpy, per sequence:

    ``tokens`` [B, P+T]; ``rollout_routes`` [B, T, layers, top_k] (the routes of the position that predicts each
    response token); ``trainer_routes`` (fp32, routing freely) and ``replayed_routes`` (fp32 forward forced onto the
    rollout's routes at every position, prompt included) of the same shape; ``rollout_logp``, ``trainer_logp``,
    ``replay_logp`` [B, T] of the sampled tokens; ``tv``, ``tv_replay`` [B, T]: exact full-vocabulary TV between
    the rollout's distribution and the trainer's without / with replay."""
    model = build_moe_model(cfg)
    g = torch.Generator().manual_seed(sample_seed)
    prompts = torch.randint(0, cfg.vocab, (batch, prompt_len), generator=g)
    toks, roll_full, roll_routes = sample(model, prompts, length, numerics=numerics, gen=g, record_routes=True)
    y = toks[:, prompt_len:]
    rec: list = []
    train_full = trainer_logp(model, toks, prompt_len, dtype=torch.float64, routes_out=rec)
    rec_r: list = []
    replay_full = trainer_logp(model, toks, prompt_len, dtype=torch.float64, replay=roll_routes, routes_out=rec_r)

    def pick(lp):
        return lp.gather(-1, y[..., None])[..., 0].numpy()

    P = prompt_len - 1
    return {
        "tokens": toks.numpy(),
        "prompt_len": prompt_len,
        "rollout_routes": roll_routes[:, P:].numpy(),
        "trainer_routes": rec[0][:, P:].numpy(),
        "replayed_routes": rec_r[0][:, P:].numpy(),
        "rollout_logp": pick(roll_full),
        "trainer_logp": pick(train_full),
        "replay_logp": pick(replay_full),
        "tv": exact_tv_kl(roll_full, train_full)[0].numpy(),
        "tv_replay": exact_tv_kl(roll_full, replay_full)[0].numpy(),
        "n_experts": cfg.n_experts,
    }


def experiment_records(
    exp: dict,
    *,
    trainer_routes: str = "trainer_routes",
    replay: str | None = "none",
    run_id: str = "moe-ground-truth",
    step: int = 0,
    router_probs: bool = False,
) -> list[dict]:
    """fcr/1 records (one policy call per sequence) of a :func:`routing_experiment`: tokens, both sides' log-probs
    of the sampled tokens and both sides' routes (``trainer_routes`` names which trainer routes: ``trainer_routes``
    or ``replayed_routes``, with the matching log-probs), the declared ``replay`` mode and ``model.num_experts``."""
    from workers.fcr.synth import sha256_ids

    lp_key = {"trainer_routes": "trainer_logp", "replayed_routes": "replay_logp"}[trainer_routes]
    P = exp["prompt_len"]
    out = []
    for b, toks in enumerate(exp["tokens"].tolist()):
        prompt, resp = toks[:P], toks[P:]
        cid = f"{run_id}-s{step}-{b}"
        rollout = {"logprobs": exp["rollout_logp"][b].tolist(), "routed_experts": exp["rollout_routes"][b].tolist()}
        if router_probs:
            rollout["router_topk_probs"] = np.full(exp["rollout_routes"][b].shape, 0.5).tolist()
        out.append(
            {
                "schema": "fcr/1",
                "run_id": run_id,
                "trajectory_id": f"{run_id}-t{b}",
                "step": step,
                "call_id": cid,
                "call_index": 0,
                "parent_call_id": None,
                "role": "policy",
                "role_source": "header",
                "purpose": "main_loop",
                "model": {"served_name": "tiny-moe", "policy_version": step, "num_experts": int(exp["n_experts"])},
                "tokenizer": {"id": "tiny-moe@1", "sha256": "0" * 64},
                "chat_template": None,
                "engine": {
                    "name": "tiny-moe-bf16",
                    "api": "generate",
                    "logprobs_mode": "raw_logprobs",
                    "generation_config_source": "request_only",
                },
                "sampling": {"temperature": 1.0},
                "source": {"format": "synthetic", "ref": cid, "importer_version": "1"},
                "prompt": {"token_ids": prompt, "provenance": "engine", "ids_sha256": sha256_ids(prompt)},
                "response": {"token_ids": resp, "provenance": "engine", "ids_sha256": sha256_ids(resp)},
                "rollout": rollout,
                "trainer": {
                    "policy_version": step,
                    "logprobs": exp[lp_key][b].tolist(),
                    "routed_experts": exp[trainer_routes][b].tolist(),
                    "routing_replay": replay,
                    "loss_mask_used": [1] * len(resp),
                    "sample_id": cid,
                },
            }
        )
    return out
