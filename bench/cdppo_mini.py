"""Miniature C-DPPO experiment: PPO vs DPPO vs TRM vs C-DPPO under an injected rollout/trainer mismatch.

    .venv/bin/python bench/cdppo_mini.py                 # defaults: 4 methods × 10 seeds, 2 processes, ≲ 10 min on 2 cores
    .venv/bin/python bench/cdppo_mini.py --seeds 3 --steps 60 --out bench/out/quick

Task (workers/training/task.py): copy the prompt, R = fraction of response tokens equal to x_{t mod P} ∈ [0, 1].
Policy: the package's seeded tiny causal transformer (workers/training/model.py). Trainer numerics: fp32.
Rollout numerics: the same weights under bf16 autocast (real bf16 rounding) plus an injected mismatch on the logits:
  * rounding-like noise: logits · (1 + σ·N(0,1)), σ = ``--noise`` (default 2⁻⁷);
  * "routing flips": with probability ``--flip`` per token position the rollout's logits are replaced by a random
    permutation of themselves scaled by ``--flip-scale`` (an expert switch: the distribution the token is sampled
    from is unrelated to the trainer's).
Each step samples ``--prompts × --group`` sequences, computes GRPO-style advantages R − mean_group(R), and takes
``--epochs`` Adam updates on the batch (bypass mode: the only anchor is the rollout policy).

Methods (losses from workers/training/losses.py; masks from workers/certify):
  ppo    PPO clip [0.8, 1.28] on r = π_θ/π_roll, w = r
  dppo   DPPO Binary-TV δ = 0.15, w = r
  trm    TRM-Max with exact KL(π_roll‖π_θ) from the full rollout logits, δ = 0.05, normalised by N
  cdppo  C-DPPO: certified TV interval from top-K lists (K = ``--topk``) of both sides, fp32 widening, adaptive K,
         θ = 0.15, UNDETERMINED fails closed
Outputs (``--out``, default bench/out/cdppo_mini): results.json (every run's curve and metrics), table.md, curves.html.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from workers.certify.intervals import exact_tv_kl
from workers.training import losses as Ls
from workers.training.model import ModelConfig, build_model, sample, trainer_logp
from workers.training.plotting import write_html
from workers.training.task import copy_reward, group_advantages

METHODS = ("ppo", "dppo", "trm", "cdppo")


def make_noise(args, gen):
    """The injected rollout-side mismatch (module docstring); ``gen`` a CPU generator (reproducible per run)."""

    def f(step, logits):
        lg = logits.cpu()
        noise = torch.randn(lg.shape, generator=gen, dtype=lg.dtype)
        lg = lg * (1.0 + args.noise * noise)
        if args.flip > 0:
            hit = torch.rand(lg.shape[0], generator=gen, dtype=lg.dtype) < args.flip
            perm = torch.argsort(torch.rand(lg.shape, generator=gen), -1)
            flipped = lg.gather(-1, perm) * args.flip_scale
            lg = torch.where(hit[:, None], flipped, lg)
        return lg.to(logits.device)

    return f


def method_loss(method, logp, lp_roll, adv, ctx, args):
    if method == "ppo":
        return Ls.ppo_clip_loss(logp, lp_roll, adv, norm="token")
    if method == "dppo":
        return Ls.dppo_loss(logp, lp_roll, adv, threshold=args.dppo_tv, norm="token")
    if method == "trm":
        return Ls.trm_loss(
            logp, lp_roll, adv, mode="kl", threshold=args.trm_kl, kl=ctx["kl"], tv=ctx["tv"], norm="batch"
        )
    if method == "cdppo":
        return Ls.cdppo_loss(
            logp,
            lp_roll,
            adv,
            lists=ctx["lists"],
            threshold=args.dppo_tv,
            precision="fp32",
            adaptive=True,
            norm="token",
        )
    raise ValueError(method)


def run_one(job):
    method, seed, args = job
    torch.set_num_threads(1)
    args = argparse.Namespace(**args)
    t0 = time.perf_counter()
    cfg = ModelConfig(
        vocab=args.vocab, d_model=args.d_model, n_layers=args.layers, n_heads=2, max_len=32, seed=1000 + seed
    )
    model = build_model(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(seed)  # prompts and sampling: identical across methods per seed
    ngen = torch.Generator().manual_seed(10_000 + seed)  # injected mismatch
    noise = make_noise(args, ngen)
    P, T = args.prompt_len, args.length
    curve, masked, tv_means, flips_seen, nan = [], [], [], [], False
    for step in range(args.steps):
        prompts = torch.randint(0, args.vocab, (args.prompts, P), generator=gen).repeat_interleave(args.group, 0)
        model.eval()
        tokens, roll_full = sample(model, prompts, T, numerics="bf16_autocast", gen=gen, logit_noise=noise)
        y = tokens[:, P:]
        R = copy_reward(prompts, y)
        adv = group_advantages(R, args.group)
        lp_roll = roll_full.gather(-1, y[..., None])[..., 0]
        curve.append(float(R.mean()))
        model.train()
        for _ in range(args.epochs):
            logp_full = trainer_logp(model, tokens, P)
            logp = logp_full.gather(-1, y[..., None])[..., 0]
            with torch.no_grad():
                tr64 = torch.log_softmax(logp_full.detach().double(), -1)
            ctx = {}
            if method == "trm":
                ctx["tv"], ctx["kl"] = exact_tv_kl(roll_full, tr64)
            if method == "cdppo":
                pv, pi = torch.topk(roll_full, args.topk, -1)
                qv, qi = torch.topk(tr64, args.topk, -1)
                ctx["lists"] = {"p_ids": pi, "p_lp": pv, "q_ids": qi, "q_lp": qv, "sampled_id": y}
            out = method_loss(method, logp, lp_roll, adv, ctx, args)
            opt.zero_grad()
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            opt.step()
            masked.append(out.info["masked_fraction"])
            if not torch.isfinite(out.loss):
                nan = True
        if step % 10 == 0:
            with torch.no_grad():
                tv, _ = exact_tv_kl(roll_full, tr64)
            tv_means.append(float(tv.mean()))
            flips_seen.append(float((tv > 0.5).to(torch.float64).mean()))
    # final evaluation under trainer numerics (fp32, no injected mismatch), fresh prompts
    model.eval()
    eg = torch.Generator().manual_seed(99_999)
    prompts = torch.randint(0, args.vocab, (args.eval_n, P), generator=eg)
    tokens, _ = sample(model, prompts, T, numerics="fp32", gen=eg)
    final = float(copy_reward(prompts, tokens[:, P:]).mean())
    w = max(1, args.steps // 10)
    peak = max(sum(curve[i : i + w]) / w for i in range(0, len(curve) - w + 1))
    last = sum(curve[-w:]) / w
    return {
        "method": method,
        "seed": seed,
        "final_reward": final,
        "train_curve": curve,
        "peak_train_reward": peak,
        "last_train_reward": last,
        "collapsed": bool(nan or (last < peak - args.collapse_drop)),
        "masked_fraction": sum(masked) / len(masked),
        "token_tv_mean": sum(tv_means) / len(tv_means),
        "token_tv_over_0.5": sum(flips_seen) / len(flips_seen),
        "seconds": time.perf_counter() - t0,
    }


def mean_ci(xs, level=0.95):
    """Mean and half-width of the Student-t confidence interval."""
    from scipy import stats

    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    return m, float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)


def summarise(runs, methods, seeds):
    rows = []
    by = {m: sorted([r for r in runs if r["method"] == m], key=lambda r: r["seed"]) for m in methods}
    for m in methods:
        rs = by[m]
        fm, fh = mean_ci([r["final_reward"] for r in rs])
        lm, lh = mean_ci([r["last_train_reward"] for r in rs])
        rows.append(
            {
                "method": m,
                "n": len(rs),
                "final_reward": fm,
                "final_ci": fh,
                "last_train": lm,
                "last_train_ci": lh,
                "collapses": sum(r["collapsed"] for r in rs),
                "masked_fraction": sum(r["masked_fraction"] for r in rs) / len(rs),
                "token_tv_mean": sum(r["token_tv_mean"] for r in rs) / len(rs),
                "seconds": sum(r["seconds"] for r in rs) / len(rs),
            }
        )
    paired = {}
    if "cdppo" in by and "dppo" in by:
        d = [c["final_reward"] - p["final_reward"] for c, p in zip(by["cdppo"], by["dppo"])]
        dm, dh = mean_ci(d)
        paired = {"cdppo_minus_dppo": dm, "ci": dh, "per_seed": d, "wins": sum(x > 0 for x in d), "n": len(d)}
    return rows, paired


def table_md(rows, paired):
    lines = [
        "| method | seeds | final reward (fp32 eval, mean ± 95% CI) | last-10% train reward | collapses | "
        "masked token fraction | mean token TV | s / run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['n']} | {r['final_reward']:.3f} ± {r['final_ci']:.3f} | "
            f"{r['last_train']:.3f} ± {r['last_train_ci']:.3f} | {r['collapses']} | "
            f"{r['masked_fraction']:.2%} | {r['token_tv_mean']:.3f} | {r['seconds']:.0f} |"
        )
    if paired:
        lines.append("")
        lines.append(
            f"Paired (same seeds) C-DPPO − DPPO final reward: {paired['cdppo_minus_dppo']:+.3f} ± "
            f"{paired['ci']:.3f} (95% CI); C-DPPO higher on {paired['wins']}/{paired['n']} seeds."
        )
    return "\n".join(lines)


def curves_figure(runs, methods):
    import plotly.graph_objects as go

    fig = go.Figure()
    colors = {"ppo": "#7f7f7f", "dppo": "#1f77b4", "trm": "#2ca02c", "cdppo": "#d62728"}
    for m in methods:
        cs = [r["train_curve"] for r in runs if r["method"] == m]
        n = min(len(c) for c in cs)
        mean = [sum(c[i] for c in cs) / len(cs) for i in range(n)]
        lo = [min(c[i] for c in cs) for i in range(n)]
        hi = [max(c[i] for c in cs) for i in range(n)]
        x = list(range(n))
        col = colors.get(m, "#000")
        fig.add_trace(
            go.Scatter(
                x=x + x[::-1],
                y=hi + lo[::-1],
                fill="toself",
                line={"width": 0},
                fillcolor=col,
                opacity=0.15,
                showlegend=False,
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=x, y=mean, name=f"{m} (mean of {len(cs)} seeds; band = min–max)", line={"color": col, "width": 2}
            )
        )
    fig.update_layout(
        title="cdppo_mini: rollout reward per step (bf16 rollout + injected noise/flips vs fp32 trainer)",
        xaxis_title="step",
        yaxis_title="mean reward of the rollout batch",
        height=480,
        width=1000,
    )
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--prompt-len", dest="prompt_len", type=int, default=3)
    ap.add_argument("--length", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8)
    ap.add_argument("--d-model", dest="d_model", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--clip-grad", dest="clip_grad", type=float, default=1.0)
    ap.add_argument("--noise", type=float, default=2**-7)
    ap.add_argument("--flip", type=float, default=0.03)
    ap.add_argument("--flip-scale", dest="flip_scale", type=float, default=1.5)
    ap.add_argument("--topk", type=int, default=4)
    ap.add_argument("--dppo-tv", dest="dppo_tv", type=float, default=0.15)
    ap.add_argument("--trm-kl", dest="trm_kl", type=float, default=0.05)
    ap.add_argument("--eval-n", dest="eval_n", type=int, default=512)
    ap.add_argument(
        "--collapse-drop",
        dest="collapse_drop",
        type=float,
        default=0.2,
        help="a run collapsed if its last-10%% train reward is this far below its peak 10%% window",
    )
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--out", default="bench/out/cdppo_mini")
    args = ap.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    torch.set_num_threads(1)
    jobs = [(m, s, vars(args)) for s in range(args.seeds) for m in methods]
    t0 = time.perf_counter()
    procs = max(1, min(2, args.procs))
    if procs == 1:
        runs = [run_one(j) for j in jobs]
    else:
        with mp.get_context("spawn").Pool(procs) as pool:
            runs = []
            for r in pool.imap_unordered(run_one, jobs):
                runs.append(r)
                print(
                    f"  {r['method']:<6} seed {r['seed']}: final {r['final_reward']:.3f} "
                    f"masked {r['masked_fraction']:.2%} ({r['seconds']:.0f}s)",
                    flush=True,
                )
    wall = time.perf_counter() - t0
    rows, paired = summarise(runs, methods, args.seeds)
    os.makedirs(args.out, exist_ok=True)
    cfg = {k: v for k, v in vars(args).items()}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(
            {
                "config": cfg,
                "wall_seconds": wall,
                "torch": torch.__version__,
                "rows": rows,
                "paired": paired,
                "runs": runs,
            },
            f,
            indent=1,
        )
    md = table_md(rows, paired)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(md + "\n")
    write_html(curves_figure(runs, methods), os.path.join(args.out, "curves.html"))
    print(md)
    print(f"wall {wall:.0f}s; wrote {args.out}/results.json, table.md, curves.html")


if __name__ == "__main__":
    main()
