"""A small causal transformer defined here, initialised from a fixed seed (no downloads), and sampling under
"rollout numerics" vs recomputation under "trainer numerics" (the training/inference
mismatch, docs/bounds.md#setup-and-notation).

Rollout numerics (a comma-separated string, e.g. ``"bf16_autocast,sdpa,extra_batch"``):

* precision: ``fp32`` | ``bf16_autocast`` (matmuls in bf16 under ``torch.autocast``, as an inference engine's
  bf16 kernels) | ``bf16_weights`` (the whole model cast to bf16, activations bf16; log-softmax in fp32 afterwards);
* ``sdpa``: attention through ``F.scaled_dot_product_attention`` instead of the explicit softmax(QKᵀ)V path;
* ``extra_batch``: the rollout batch is padded with as many unrelated prompts (a different batch composition, hence
  different kernel shapes / blocking on GPUs).

Sampling is always decode-style (each step recomputes the prefix, no cache), while the trainer recomputes the whole
sequence in one fp32 forward with the explicit attention path — the prefill/decode difference is part of the
mismatch, as in real RL stacks.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workers.training.config import parse_numerics


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 32
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 64
    seed: int = 0

    def to_dict(self):
        return asdict(self)


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, attn="math"):
        x = self.attend(x, attn)
        return x + self.mlp(self.ln2(x))

    def attend(self, x, attn="math"):
        """The residual attention half of the block."""
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(B, L, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        if attn == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(D // self.h)
            causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
            s = s.masked_fill(~causal, float("-inf"))
            o = torch.softmax(s.float(), -1).to(v.dtype) @ v
        return x + self.proj(o.transpose(1, 2).reshape(B, L, D))


class TinyCausalLM(nn.Module):
    """Pre-LN decoder-only transformer: token + learned position embeddings, ``n_layers`` blocks, tied-free head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, tokens, attn="math"):
        L = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(L, device=tokens.device))[None]
        for b in self.blocks:
            x = b(x, attn)
        return self.head(self.ln(x))


def build_model(cfg: ModelConfig = ModelConfig(), device="cpu") -> TinyCausalLM:
    """The model with weights drawn from ``cfg.seed`` (deterministic on every machine; fp32)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        m = TinyCausalLM(cfg)
        with torch.no_grad():  # larger-than-default logits so the policy is not near-uniform
            m.head.weight.mul_(4.0)
    return m.to(device)


def _device_type(device) -> str:
    return torch.device(device).type


def rollout_logits_fn(model: TinyCausalLM, numerics: str):
    """A function ``tokens -> fp32 logits`` evaluating ``model`` under the rollout numerics (see module docstring);
    keyword arguments are passed on to the model's forward (e.g. ``routes_out`` of the MoE model)."""
    nx = parse_numerics(numerics)
    dev = next(model.parameters()).device
    if nx["precision"] == "bf16_weights":
        m = copy.deepcopy(model).to(torch.bfloat16)

        def f(tokens, **kw):
            return m(tokens, nx["attn"], **kw).float()
    elif nx["precision"] == "bf16_autocast":

        def f(tokens, **kw):
            with torch.autocast(_device_type(dev), dtype=torch.bfloat16):
                return model(tokens, nx["attn"], **kw).float()
    else:

        def f(tokens, **kw):
            return model(tokens, nx["attn"], **kw).float()

    return f, nx


@torch.no_grad()
def sample(
    model: TinyCausalLM,
    prompts: torch.Tensor,
    length: int,
    *,
    numerics: str = "bf16_autocast",
    gen: torch.Generator | None = None,
    temperature: float = 1.0,
    logit_noise=None,
    record_routes: bool = False,
):
    """Decode ``length`` tokens per prompt under rollout numerics.

    Returns ``(tokens [B, P+T], roll_logp [B, T, V] float64)`` — the rollout's full log-probs at every response
    position (the distribution each token was sampled from). ``logit_noise(step, logits) -> logits`` optionally
    injects a synthetic mismatch (bench). ``gen`` (a CPU generator) makes sampling reproducible on any device.
    ``record_routes`` (MoE models, :mod:`.moe`): also return the experts chosen ``[B, P+T−1, layers, top_k]`` as an
    engine with a KV cache records them — prompt positions from the first forward, each later position from the step
    where it is the newest one.
    """
    f, nx = rollout_logits_fn(model, numerics)
    dev = prompts.device
    B = prompts.shape[0]
    toks = prompts
    if nx["extra_batch"]:
        g2 = torch.Generator().manual_seed(12345)
        filler = torch.randint(0, model.cfg.vocab, prompts.shape, generator=g2).to(dev)
        toks = torch.cat([prompts, filler], 0)
    out = []
    rec, routes = ([], []) if record_routes else (None, None)
    for t in range(length):
        logits = f(toks, **({} if rec is None else {"routes_out": rec}))[:, -1, :].double() / temperature
        if rec is not None:
            r = rec.pop()[:B]
            routes.append(r[:, :-1] if t == 0 else r[:, -1:])
            if t == 0:
                routes.append(r[:, -1:])
        if logit_noise is not None:
            logits = logit_noise(t, logits)
        lp = torch.log_softmax(logits, -1)
        probs = lp.exp().cpu()
        nxt = torch.multinomial(probs, 1, generator=gen).to(dev)
        toks = torch.cat([toks, nxt], 1)
        out.append(lp[:B].cpu())
    if rec is not None:
        return toks[:B], torch.stack(out, 1), torch.cat(routes, 1).cpu()
    return toks[:B], torch.stack(out, 1)


def trainer_logits(model: TinyCausalLM, tokens: torch.Tensor, prompt_len: int, *, temperature: float = 1.0, **kw):
    """Trainer numerics: one fp32 forward over the whole sequence (explicit attention); fp32 logits ``[B, T, V]`` of
    the response positions (position P+t−1 predicts token P+t). ``kw`` goes to the forward (MoE: ``replay``,
    ``routes_out``)."""
    return model(tokens[:, :-1], "math", **kw).float()[:, prompt_len - 1 :, :] / temperature


def trainer_logp(
    model: TinyCausalLM, tokens: torch.Tensor, prompt_len: int, *, temperature: float = 1.0, dtype=torch.float32, **kw
):
    """Differentiable log-probs ``[B, T, V]`` of the trainer (log-softmax in ``dtype``). For certificates use
    ``dtype=torch.float64``: an fp32 log-softmax is normalised only to ~1e-7, enough to push a certified lower end
    (which assumes Σ = 1) above the "exact" TV computed from the same values."""
    return torch.log_softmax(trainer_logits(model, tokens, prompt_len, temperature=temperature, **kw).to(dtype), -1)
