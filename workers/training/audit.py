"""Training-step audit (docs/training.md#2-training-step-audit-workerstrainingmodelpy-auditpy; the mathematics:
docs/intervals.md#trainer-distribution-known, docs/bounds.md#sequence-certificate).

Given a batch of prompts: sample rollouts under rollout numerics (:mod:`.model`), recompute under trainer numerics
(fp32), then report

1. exact full-vocabulary per-token TV and KL(π_roll‖π_θ) (:func:`workers.certify.intervals.exact_tv_kl`) and the
   sampled-token estimators (k1, k2, k3, Binary-TV/KL) next to them;
2. the certificate from the exact values (tv_lo = tv_hi = TV, kl = KL; TRM-Max KL and TV modes) next to the
   certificate from the **top-K-only view of the same data** (Theorem A intervals with caps, adaptive K): interval
   widths, containment of the exact value, UNDETERMINED share at several thresholds, and the bounds B* each view
   certifies (the top-K view has no KL upper bound, docs/intervals.md#kl-bounds,
   so every KL row disappears);
3. one optimiser step per loss from the same start, recording what each loss masks (tokens, sequences), its
   gradient norm and the post-step exact divergence to the rollout policy.

Pure function :func:`audit` returning a JSON-safe dict; ``device`` may be ``"cuda"`` (models and forwards there,
all certificate maths on CPU in float64).
"""

from __future__ import annotations

import copy
import math
import time

import torch

from workers.certify.adaptive import adaptive_k
from workers.certify.estimators import sampled_estimates
from workers.certify.intervals import exact_tv_kl, tv_interval_topk
from workers.certify.sequence import sequence_certificate
from workers.training import losses as Ls
from workers.training.model import ModelConfig, build_model, sample, trainer_logp
from workers.training.task import copy_reward, group_advantages

THRESHOLDS = (0.15, 0.05, 0.01, 0.002)


def _q(x: torch.Tensor) -> dict:
    """Summary statistics of a float tensor (JSON-safe)."""
    x = x.detach().to(torch.float64).reshape(-1).cpu()
    if x.numel() == 0:
        return {"n": 0}
    qs = torch.quantile(x, torch.tensor([0.5, 0.9, 0.99], dtype=torch.float64)) if x.numel() < 10_000_000 else None
    return {
        "n": int(x.numel()),
        "mean": float(x.mean()),
        "max": float(x.max()),
        "min": float(x.min()),
        "p50": float(qs[0]),
        "p90": float(qs[1]),
        "p99": float(qs[2]),
    }


def _bounds(b: dict) -> dict:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in b.items()}


def topk_lists(full_logp: torch.Tensor, K: int):
    """Top-K ids and log-probs (descending) of full log-probs ``[B, T, V]``."""
    v, i = torch.topk(full_logp, K, -1)
    return i, v


def exact_and_topk(roll_full, train_full, y, *, K: int, precision="fp32"):
    """The same positions seen twice: exact TV/KL from the full distributions, and the certified interval the
    top-K lists alone allow. Returns ``(tv, kl, a, b, (p_ids, p_lp, q_ids, q_lp), interval)`` with ``a``/``b`` the
    sampled token's rollout/trainer log-probs."""
    tv, kl = exact_tv_kl(roll_full, train_full)
    a = roll_full.gather(-1, y[..., None])[..., 0]
    b = train_full.gather(-1, y[..., None])[..., 0]
    p_ids, p_lp = topk_lists(roll_full, K)
    q_ids, q_lp = topk_lists(train_full, K)
    r = tv_interval_topk(p_ids, p_lp, q_ids, q_lp, y, a, b, caps=True, precision=precision)
    return tv, kl, a, b, (p_ids, p_lp, q_ids, q_lp), r


def certificate_views(
    roll_full, train_full, y, mask, *, K: int, thresholds=THRESHOLDS, precision="fp32", budget=0.5, constants="paper"
) -> dict:
    """Exact certificate vs the top-K-only certificate of the same positions (module docstring, item 2)."""
    tv, kl, a, b, (p_ids, p_lp, q_ids, q_lp), r = exact_and_topk(roll_full, train_full, y, K=K, precision=precision)
    m = mask
    width = (r.hi - r.lo)[m]
    contains = ((r.lo <= tv + 1e-12) & (tv <= r.hi + 1e-12))[m]
    est = sampled_estimates(a, b)
    out = {
        "K": K,
        "precision": precision,
        "exact": {"tv": _q(tv[m]), "kl": _q(kl[m])},
        "sampled": {k: _q(est[k][m]) for k in ("k1", "k2", "k3", "bin_tv", "bin_kl")},
        "topk": {
            "tv_lo": _q(r.lo[m]),
            "tv_hi": _q(r.hi[m]),
            "width": _q(width),
            "contains_exact": float(contains.to(torch.float64).mean()),
            "data_errors": int((r.err[m] != 0).sum()),
            "kl_upper_finite_share": float(torch.isfinite(r.kl_hi[m]).to(torch.float64).mean()),
        },
        "by_threshold": [],
    }
    for th in thresholds:
        K_used, lo_a, hi_a, st_a = adaptive_k(p_ids, p_lp, q_ids, q_lp, y, a, b, threshold=th, precision=precision)
        n = int(m.sum())
        ex_out = int(((tv > th) & m).sum())
        out["by_threshold"].append(
            {
                "threshold": th,
                "exact_out_share": ex_out / max(n, 1),
                "topk_in_share": int(((st_a == 0) & m).sum()) / max(n, 1),
                "topk_out_share": int(((st_a == 1) & m).sum()) / max(n, 1),
                "topk_undetermined_share": int(((st_a == 2) & m).sum()) / max(n, 1),
                "adaptive_K_mean": float(K_used[m].to(torch.float64).mean()),
                "sequence_accept_exact_tv": float(
                    ((torch.where(m, tv, 0 * tv).amax(-1)) <= th).to(torch.float64).mean()
                ),
                "sequence_accept_topk_tv": float(
                    ((torch.where(m, hi_a, 0 * hi_a).amax(-1)) <= th).to(torch.float64).mean()
                ),
            }
        )
    ex_kl = sequence_certificate(tv, tv, kl, m, kl_lo=kl, mode="kl", threshold=0.05, constants=constants)
    ex_tv = sequence_certificate(tv, tv, kl, m, kl_lo=kl, mode="tv", threshold=0.15, constants=constants)
    tk_tv = sequence_certificate(r.lo, r.hi, None, m, err=r.err, mode="tv", threshold=0.15, constants=constants)
    tk_b = sequence_certificate(r.lo, r.hi, None, m, err=r.err, mode="tv", budget=budget, constants=constants)
    ex_b = sequence_certificate(tv, tv, kl, m, kl_lo=kl, mode="kl", budget=budget, constants=constants)
    out["sequence"] = {
        "exact_kl_mode": {"acceptance_rate": ex_kl["acceptance_rate"], "bounds": _bounds(ex_kl["bounds"])},
        "exact_tv_mode": {"acceptance_rate": ex_tv["acceptance_rate"], "bounds": _bounds(ex_tv["bounds"])},
        "topk_tv_mode": {"acceptance_rate": tk_tv["acceptance_rate"], "bounds": _bounds(tk_tv["bounds"])},
        "budget": budget,
        "exact_budget_kl": {
            "threshold": ex_b["threshold"],
            "via": ex_b["threshold_source"],
            "acceptance_rate": ex_b["acceptance_rate"],
        },
        "topk_budget_tv": {
            "threshold": tk_b["threshold"],
            "via": tk_b["threshold_source"],
            "acceptance_rate": tk_b["acceptance_rate"],
        },
    }
    return out


def _loss_specs(thr_tv=0.15, thr_kl=0.05):
    return {
        "ppo": dict(fn="ppo"),
        "grpo": dict(fn="grpo"),
        "tis": dict(fn="tis"),
        "seq_mis": dict(fn="seq_mis"),
        "icepop": dict(fn="icepop"),
        "cispo": dict(fn="cispo"),
        "dppo_binary_tv": dict(fn="dppo", threshold=thr_tv),
        "dppo_binary_kl": dict(fn="dppo", threshold=thr_kl, divergence="binary_kl"),
        "dppo_topk_tv": dict(fn="dppo", threshold=thr_tv, divergence="topk_tv"),
        "dppo_topk_kl": dict(fn="dppo", threshold=thr_kl, divergence="topk_kl"),
        "trm_max_kl": dict(fn="trm", mode="kl", threshold=thr_kl),
        "trm_max_avg_kl": dict(fn="trm", mode="kl", threshold=0.1, avg_threshold=0.002),
        "trm_k2max": dict(fn="trm", mode="k2max", threshold=thr_kl),
        "cdppo": dict(fn="cdppo", threshold=thr_tv),
        "cdppo_budget": dict(fn="cdppo", threshold=thr_tv, budget=0.5),
    }


def loss_call(name, spec, logp, ctx):
    """Evaluate one named loss on the batch context ``ctx`` (rollout log-probs, advantages, lists, exact tv/kl)."""
    spec = dict(spec)
    fn = spec.pop("fn")
    common = (logp, ctx["logp_roll"], ctx["adv"], ctx["mask"])
    if fn == "dppo" and spec.get("divergence", "").startswith("topk"):
        spec["topk"] = {
            "roll_ids": ctx["p_ids"],
            "roll_topk_logp": ctx["p_lp"],
            "train_logp_at_roll_ids": ctx["train_full"].gather(-1, ctx["p_ids"]),
            "sampled_id": ctx["y"],
        }
    if fn == "cdppo":
        spec["lists"] = {
            "p_ids": ctx["p_ids"],
            "p_lp": ctx["p_lp"],
            "q_ids": ctx["q_ids"],
            "q_lp": ctx["q_lp"],
            "sampled_id": ctx["y"],
        }
        spec.setdefault("precision", ctx.get("precision", "fp32"))
    if fn == "trm" and spec.get("mode") in ("kl", "tv"):
        spec["kl"], spec["tv"] = ctx["kl"], ctx["tv"]
    return Ls.LOSSES[fn](*common, **spec)


def profile(roll_full, train_full, y, *, K: int, bins: int = 40, precision="fp32") -> dict:
    """Compact per-position and distribution summaries of the exact per-token divergence (for figures): mean and
    max exact TV / KL at each response position, the mean top-K interval [lo, hi] at K next to the mean exact TV,
    and a histogram of exact TV over log10-spaced bins (zeros counted apart)."""
    tv, kl, _, _, _, r = exact_and_topk(roll_full, train_full, y, K=K, precision=precision)
    pos = {
        "tv_mean": tv.mean(0),
        "tv_max": tv.amax(0),
        "kl_mean": kl.mean(0),
        "kl_max": kl.amax(0),
        "topk_lo_mean": r.lo.mean(0),
        "topk_hi_mean": r.hi.mean(0),
        "topk_hi_max": r.hi.amax(0),
    }
    flat = tv.reshape(-1).to(torch.float64)
    pos_tv = flat[flat > 0]
    hist = {"zeros": int((flat <= 0).sum()), "log10_edges": [], "counts": []}
    if pos_tv.numel():
        lo, hi = math.floor(float(pos_tv.min().log10()) * 4) / 4, math.ceil(float(pos_tv.max().log10()) * 4) / 4
        hi = max(hi, lo + 0.25)
        edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)
        counts = torch.histc(pos_tv.log10(), bins=bins, min=lo, max=hi)
        hist = {"zeros": hist["zeros"], "log10_edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
    return {
        "K": K,
        "position": {k: [float(x) for x in v] for k, v in pos.items()},
        "tv_histogram": hist,
        "tokens": {"tv": tv, "kl": kl, "topk_lo": r.lo, "topk_hi": r.hi},
    }


def audit(
    *,
    device="cpu",
    batch: int = 16,
    group: int = 4,
    prompt_len: int = 4,
    length: int = 16,
    topk: int = 8,
    numerics: str = "bf16_autocast",
    seed: int = 0,
    cfg: ModelConfig | None = None,
    lr: float = 1.0,
    optimizer: str = "sgd",
    budget: float = 0.5,
    losses=None,
    thresholds=THRESHOLDS,
    prompts=None,
    progress=None,
    arrays: bool = False,
) -> dict:
    """One audited training step (module docstring). ``batch`` sequences = ``batch // group`` prompts × ``group``
    samples (GRPO-style advantages R − mean_group(R)). The step is plain SGD by default, so the post-step
    divergence reflects each loss's masked gradient (Adam's first step has size ≈ lr whatever the gradient);
    ``optimizer="adam"`` is available. ``prompts`` (equally long token-id lists) replaces the seeded prompts;
    each is sampled ``group`` times. ``progress(fraction, message)`` is called between stages. With ``arrays``
    the result also holds the per-token exact TV/KL and top-K interval ends (``[B][T]`` lists) under ``arrays``.
    Returns a JSON-safe dict."""

    def report(fraction, message):
        if progress is not None:
            progress(fraction, message)

    t0 = time.perf_counter()
    cfg = cfg or ModelConfig(seed=seed)
    model = build_model(cfg, device)
    gen = torch.Generator().manual_seed(seed + 1)
    if prompts is None:
        n_prompts = max(batch // group, 1)
        base = torch.randint(0, cfg.vocab, (n_prompts, prompt_len), generator=gen)
    else:
        base = torch.as_tensor(prompts, dtype=torch.long)
        if base.ndim != 2 or int(base.min()) < 0 or int(base.max()) >= cfg.vocab:
            raise ValueError("prompts must be equally long lists of token ids in [0, vocab)")
        prompt_len = base.shape[1]
    prompts = base.repeat_interleave(group, 0).to(device)
    report(0.02, f"sampling {prompts.shape[0]} rollouts of {length} tokens under {numerics}")
    tokens, roll_full = sample(model, prompts, length, numerics=numerics, gen=gen)
    t_roll = time.perf_counter()
    report(0.25, "recomputing under trainer numerics (fp32)")
    with torch.no_grad():
        train_full = trainer_logp(model, tokens, prompt_len, dtype=torch.float64).cpu()
    y = tokens[:, prompt_len:].cpu()
    mask = torch.ones(y.shape, dtype=torch.bool)
    R = copy_reward(prompts.cpu(), y, cfg.vocab)
    adv = group_advantages(R, group)
    tv, kl = exact_tv_kl(roll_full, train_full)
    report(0.3, "exact and top-K certificates")
    views = {
        f"K={K}": certificate_views(roll_full, train_full, y, mask, K=K, thresholds=thresholds, budget=budget)
        for K in sorted({1, topk})
    }
    p_ids, p_lp = topk_lists(roll_full, topk)
    q_ids, q_lp = topk_lists(train_full, topk)
    ctx = {
        "logp_roll": roll_full.gather(-1, y[..., None])[..., 0],
        "adv": adv,
        "mask": mask,
        "y": y,
        "p_ids": p_ids,
        "p_lp": p_lp,
        "q_ids": q_ids,
        "q_lp": q_lp,
        "train_full": train_full,
        "tv": tv,
        "kl": kl,
    }
    specs = _loss_specs()
    if losses is not None:
        specs = {k: v for k, v in specs.items() if k in losses}
    steps = {}
    y_dev = y.to(device)
    for i, (name, spec) in enumerate(specs.items()):
        report(0.4 + 0.55 * i / max(len(specs), 1), f"optimiser step {i + 1}/{len(specs)}: {name}")
        m2 = copy.deepcopy(model)
        opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(m2.parameters(), lr=lr)
        logp_full = trainer_logp(m2, tokens, prompt_len)
        logp = logp_full.gather(-1, y_dev[..., None])[..., 0]
        out = loss_call(name, spec, logp, ctx)
        opt.zero_grad()
        out.loss.backward()
        gn = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m2.parameters() if p.grad is not None)))
        opt.step()
        with torch.no_grad():
            new_full = trainer_logp(m2, tokens, prompt_len, dtype=torch.float64).cpu()
        tv2, kl2 = exact_tv_kl(roll_full, new_full)
        info = {k: v for k, v in out.info.items() if isinstance(v, (int, float, str, dict, type(None)))}
        steps[name] = {
            "loss": float(out.loss.detach()),
            "grad_norm": gn,
            **info,
            "masked_sequences_any": int((~out.keep & mask).any(-1).sum()),
            "post_step_tv_mean": float(tv2.mean()),
            "post_step_kl_mean": float(kl2.mean()),
            "post_step_kl_max": float(kl2.max()),
        }
    # agreement between DPPO and C-DPPO masks (what certification changes)
    agree = {}
    if "dppo_binary_tv" in specs and "cdppo" in specs:
        lp0 = train_full.gather(-1, y[..., None])[..., 0].clone()
        kd = loss_call("d", specs["dppo_binary_tv"], lp0, ctx).keep
        kc = loss_call("c", specs["cdppo"], lp0, ctx).keep
        agree = {
            "both_keep": int((kd & kc).sum()),
            "dppo_only_keeps": int((kd & ~kc).sum()),
            "cdppo_only_keeps": int((~kd & kc).sum()),
            "both_mask": int((~kd & ~kc).sum()),
        }
    prof = profile(roll_full, train_full, y, K=topk)
    tok = prof.pop("tokens")
    result = {
        "schema": "training-audit/1",
        "device": str(device),
        "torch": torch.__version__,
        "numerics": {"rollout": numerics, "trainer": "fp32,math"},
        "model": cfg.to_dict(),
        "batch": int(tokens.shape[0]),
        "group": group,
        "prompt_len": prompt_len,
        "length": length,
        "seed": seed,
        "optimizer": {"name": optimizer, "lr": lr},
        "reward": {"mean": float(R.mean()), "min": float(R.min()), "max": float(R.max())},
        "divergence": {
            "tv": _q(tv),
            "kl": _q(kl),
            "tokens_tv_over": {str(th): float((tv > th).to(torch.float64).mean()) for th in thresholds},
            "argmax_flip_share": float((roll_full.argmax(-1) != train_full.argmax(-1)).to(torch.float64).mean()),
        },
        "certificates": views,
        "steps": steps,
        "dppo_vs_cdppo_masks": agree,
        "profile": prof,
        "timing_s": {"rollout": t_roll - t0, "total": time.perf_counter() - t0},
    }
    if arrays:
        result["arrays"] = {k: v.to(torch.float64).tolist() for k, v in tok.items()}
        result["arrays"]["tokens"] = y.tolist()
    return result


def summary_lines(res: dict) -> list[str]:
    d = res["divergence"]
    lines = [
        f"audit on {res['device']} rollout={res['numerics']['rollout']} vs trainer={res['numerics']['trainer']} "
        f"batch={res['batch']} T={res['length']} V={res['model']['vocab']}",
        f"exact token TV: mean {d['tv']['mean']:.3g} p99 {d['tv']['p99']:.3g} max {d['tv']['max']:.3g};  "
        f"KL: mean {d['kl']['mean']:.3g} max {d['kl']['max']:.3g}; argmax flips {d['argmax_flip_share']:.3%}",
    ]
    for k, v in res["certificates"].items():
        s = v["sequence"]
        be = s["exact_kl_mode"]["bounds"].get("best")
        bt = s["topk_tv_mode"]["bounds"].get("best")
        lines.append(
            f"[{k}] top-K width mean {v['topk']['width']['mean']:.3g} max {v['topk']['width']['max']:.3g}; "
            f"contains exact {v['topk']['contains_exact']:.0%}; B* exact {be:.3g} vs top-K {bt:.3g}"
        )
        for row in v["by_threshold"]:
            lines.append(
                f"   θ={row['threshold']:<6} exact OUT {row['exact_out_share']:.2%}  top-K IN "
                f"{row['topk_in_share']:.2%} OUT {row['topk_out_share']:.2%} UNDET "
                f"{row['topk_undetermined_share']:.2%}  (adaptive K̄={row['adaptive_K_mean']:.2f})"
            )
    for name, s in res["steps"].items():
        lines.append(
            f"  {name:<16} masked {s['masked_fraction']:.2%} of tokens, grad-norm {s['grad_norm']:.3g}, "
            f"post-step KL mean {s['post_step_kl_mean']:.3g}"
        )
    return lines


def audit_config(cfg: dict, device="cpu", *, progress=None, arrays: bool = False) -> dict:
    """:func:`audit` of a config validated by :func:`workers.training.config.validate` (the portal's job)."""
    model = ModelConfig(**{k: cfg[k] for k in ("vocab", "d_model", "n_layers", "n_heads", "max_len", "seed")})
    return audit(
        device=device,
        batch=cfg["batch"],
        group=cfg["group"],
        prompt_len=cfg["prompt_len"],
        length=cfg["length"],
        topk=cfg["topk"],
        numerics=cfg["numerics"],
        seed=cfg["seed"],
        cfg=model,
        lr=cfg["lr"],
        optimizer=cfg["optimizer"],
        budget=cfg["budget"],
        losses=cfg["losses"],
        prompts=cfg["prompts"],
        progress=progress,
        arrays=arrays,
    )
