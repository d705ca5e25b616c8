"""Exact bound tightness: J(π_θ) − J(π_roll) − L'(π_θ) by enumerating every sequence
(docs/bounds.md#the-bounds, docs/bounds.md#tight-constants; results in
docs/training.md#3-exact-bound-tightness-workerstrainingtightnesspy).

A tiny autoregressive policy over a vocabulary of V tokens and horizon T is a table of logits per context:
level t (t = 1..T) holds ``[V^{t−1}, V]`` logits, one row per prefix y_<t (row-major index). With softmax policies
every context is reachable, so the maxima over "all reachable contexts" are maxima over the whole table.

Exact quantities (float64, vectorised per level — the only Python loop is over t ≤ T):

* ``TV(c) = ½Σ_v|π_θ(v|c) − π_roll(v|c)|``, ``KL(c) = Σ_v π_roll log(π_roll/π_θ)`` (docs/bounds.md#setup-and-notation);
  ε = max_c TV(c), δ = max_c KL(c) over all contexts;
* ``d_t^roll(c)`` = probability of prefix c under π_roll; ``D̄_t = Σ_c d_t^roll(c)·TV(c)``;
  ``D_KL^seq = Σ_t Σ_c d_t^roll(c)·KL(c)`` (= KL(P^roll‖P^θ) by the chain rule); ``D_TV^seq = ½Σ_y|P^θ(y) − P^roll(y)|``;
* ``J(π) = Σ_y P^π(y)R(y)``, ``L'(π_θ) = Σ_y P^roll(y)·R(y)·Σ_t(ρ_t(y) − 1)`` (docs/bounds.md#setup-and-notation; equals L with the
  baseline b = J(π_roll)), ``Error = J(π_θ) − J(π_roll) − L'``.

Each TRM bound comes from :func:`workers.certify.bounds.trm_bounds` with these exact inputs. The triangle bound of docs/bounds.md#tight-constants
``2Σ_t D̄_t`` is reported as ``triangle`` (not part of trm_bounds). Every bound must be ≥ |Error|.
"""

from __future__ import annotations

import math

import torch

from workers.certify.bounds import BOUND_IDS, trm_bounds

F64 = torch.float64


def random_policy(V: int, T: int, *, gen: torch.Generator, scale: float = 2.0) -> list[torch.Tensor]:
    """Logit tables ``[V^{t−1}, V]`` for t = 1..T, i.i.d. N(0, scale²) (scale sets the concentration)."""
    return [torch.randn(V**t, V, generator=gen, dtype=F64) * scale for t in range(T)]


def perturb(logits: list[torch.Tensor], kind: str, size: float, *, gen: torch.Generator, frac: float = 0.1):
    """π_θ from π_roll by a logit perturbation.

    ``uniform``: every logit + size·N(0,1) (divergence spread over all contexts — Pinsker is tight here,
    docs/bounds.md#setup-and-notation);
    ``spike``: on a random fraction ``frac`` of contexts one random token's logit + size, elsewhere unchanged
    (MoE-like routing flips: large divergence concentrated on few contexts).
    """
    out = []
    for z in logits:
        if kind == "uniform":
            out.append(z + size * torch.randn(z.shape, generator=gen, dtype=F64))
        elif kind == "spike":
            hit = torch.rand(z.shape[0], generator=gen, dtype=F64) < frac
            tok = torch.randint(0, z.shape[1], (z.shape[0],), generator=gen)
            bump = torch.zeros_like(z).scatter_(1, tok[:, None], size)
            out.append(z + torch.where(hit[:, None], bump, torch.zeros_like(z)))
        else:
            raise ValueError(f"kind must be 'uniform' or 'spike' (got {kind!r})")
    return out


def rewards(V: int, T: int, kind: str = "random", *, gen: torch.Generator | None = None, p_roll=None, p_theta=None):
    """R ∈ [0,1] per sequence ``[V^T]``: ``random`` U(0,1); ``count`` fraction of tokens equal to 0;
    ``adversarial`` 1[P^θ(y) > P^roll(y)] (maximises J(π_θ) − J(π_roll) = D_TV^seq)."""
    n = V**T
    if kind == "random":
        return torch.rand(n, generator=gen, dtype=F64)
    if kind == "count":
        idx = torch.arange(n)
        digits = torch.stack([(idx // V**k) % V for k in range(T)], -1)
        return (digits == 0).to(F64).mean(-1)
    if kind == "adversarial":
        return (p_theta > p_roll).to(F64)
    raise ValueError(f"unknown reward kind {kind!r}")


def exact_pair(roll_logits, theta_logits, R=None, *, reward="random", gen=None) -> dict:
    """All exact quantities of a policy pair (module docstring). Returns float64 tensors and floats."""
    T = len(roll_logits)
    V = roll_logits[0].shape[-1]
    lp_r = [torch.log_softmax(z, -1) for z in roll_logits]
    lp_t = [torch.log_softmax(z, -1) for z in theta_logits]
    d = torch.ones(1, dtype=F64)  # d_t^roll over prefixes of level t
    P_r = torch.ones(1, dtype=F64)
    P_t = torch.ones(1, dtype=F64)
    tv_ctx, kl_ctx, dbar, klseq_t, log_rho = [], [], [], [], []
    for t in range(T):
        pr, pt = lp_r[t].exp(), lp_t[t].exp()
        tv = 0.5 * (pr - pt).abs().sum(-1)
        kl = (pr * (lp_r[t] - lp_t[t])).sum(-1)
        tv_ctx.append(tv)
        kl_ctx.append(kl)
        dbar.append(float((d * tv).sum()))
        klseq_t.append(float((d * kl).sum()))
        log_rho.append((lp_t[t] - lp_r[t]).reshape(-1))  # [V^{t+1}] per prefix-and-token
        d = (d[:, None] * pr).reshape(-1)
        P_r = (P_r[:, None] * pr).reshape(-1)
        P_t = (P_t[:, None] * pt).reshape(-1)
    n = V**T
    if R is None:
        R = rewards(V, T, reward, gen=gen, p_roll=P_r, p_theta=P_t)
    R = torch.as_tensor(R, dtype=F64)
    # ρ_t(y) for every full sequence: level-t ratios repeated over the V^{T−t} continuations
    rho_minus_1 = torch.zeros(n, dtype=F64)
    for t in range(T):
        rho_minus_1 += torch.exp(log_rho[t]).repeat_interleave(V ** (T - t - 1)) - 1.0
    J_r = float((P_r * R).sum())
    J_t = float((P_t * R).sum())
    L = float((P_r * R * rho_minus_1).sum())
    tv_all = torch.cat(tv_ctx)
    kl_all = torch.cat(kl_ctx)
    return {
        "V": V,
        "T": T,
        "J_roll": J_r,
        "J_theta": J_t,
        "surrogate": L,
        "error": J_t - J_r - L,
        "eps": float(tv_all.max()),
        "delta": float(kl_all.max()),
        "kl_seq": sum(klseq_t),
        "tv_seq": float(0.5 * (P_t - P_r).abs().sum()),
        "tv_profile": dbar,
        "kl_seq_direct": float((P_r * (torch.log(P_r) - torch.log(P_t))).sum()),
        "reward": R,
        "P_roll": P_r,
        "P_theta": P_t,
    }


def bounds_for(stats: dict, constants: str = "paper") -> dict:
    """:func:`trm_bounds` at the pair's exact ε, δ, D_KL^seq, D_TV^seq, D̄_t, plus the triangle bound 2Σ D̄_t
    (docs/bounds.md#tight-constants)
    (only with ``constants="tight"``, where it is derived)."""
    b = trm_bounds(
        stats["T"],
        eps=stats["eps"],
        delta=stats["delta"],
        kl_seq=stats["kl_seq"],
        tv_seq=stats["tv_seq"],
        tv_profile=stats["tv_profile"],
        constants=constants,
    )
    if constants == "tight":
        b["triangle"] = 2.0 * float(sum(stats["tv_profile"]))
    return b


def sweep(
    *,
    V: int = 6,
    T: int = 6,
    sizes=None,
    spike_sizes=None,
    fracs=(0.02, 0.2),
    reward: str = "adversarial",
    seed: int = 0,
    constants: str = "paper",
) -> dict:
    """Bounds vs exact error over a sweep of divergence sizes and concentration (JSON-safe).

    Rows: kind ∈ {uniform, spike(frac)}, size; each row holds the exact error, the divergence inputs and every bound
    (plus ``ratio`` = bound / |error|). One fixed rollout policy; π_θ = perturb(π_roll).
    """
    sizes = list(sizes if sizes is not None else [10**x for x in (-3, -2.5, -2, -1.5, -1, -0.5, 0)])
    spike_sizes = list(spike_sizes if spike_sizes is not None else [0.01, 0.1, 0.5, 1, 2, 4, 8])
    gen = torch.Generator().manual_seed(seed)
    roll = random_policy(V, T, gen=gen)
    rows = []
    configs = [("uniform", s, None) for s in sizes] + [("spike", s, f) for f in fracs for s in spike_sizes]
    for kind, size, frac in configs:
        g = torch.Generator().manual_seed(seed + 1)
        theta = perturb(roll, kind, size, gen=g, frac=frac or 0.0)
        st = exact_pair(roll, theta, reward=reward, gen=torch.Generator().manual_seed(seed + 2))
        b = bounds_for(st, constants)
        err = abs(st["error"])
        row = {
            "kind": kind if frac is None else f"spike@{frac}",
            "size": size,
            "error": st["error"],
            "abs_error": err,
            "J_gain": st["J_theta"] - st["J_roll"],
            "surrogate": st["surrogate"],
            "eps": st["eps"],
            "delta": st["delta"],
            "kl_seq": st["kl_seq"],
            "tv_seq": st["tv_seq"],
            "dbar_sum": float(sum(st["tv_profile"])),
            "bounds": {k: v for k, v in b.items() if k != "argmin"},
            "argmin": b.get("argmin"),
            "holds": all(v >= err - 1e-12 for k, v in b.items() if k != "argmin"),
        }
        row["ratio"] = {k: (v / err if err > 0 else math.inf) for k, v in row["bounds"].items()}
        rows.append(row)
    return {
        "V": V,
        "T": T,
        "reward": reward,
        "seed": seed,
        "constants": constants,
        "rows": rows,
        "all_hold": all(r["holds"] for r in rows),
        "bound_ids": [k for k in BOUND_IDS],
    }


def figure(result: dict):
    """Plotly figure: |exact error| and every bound against ε, one panel per concentration kind (log-log)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    kinds = list(dict.fromkeys(r["kind"] for r in result["rows"]))
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=kinds, shared_yaxes=True)
    show = ["best", "adap_star", "mix_tv", "mix_kl", "pm_kl", "coup", "linear", "classical_tv"]
    if result.get("constants") == "tight":
        show.append("triangle")
    palette = ["#000000", "#1f77b4", "#2ca02c", "#98df8a", "#ff7f0e", "#9467bd", "#8c564b", "#7f7f7f", "#e377c2"]
    for j, kind in enumerate(kinds, start=1):
        rows = [r for r in result["rows"] if r["kind"] == kind and r["abs_error"] > 0]
        x = [r["eps"] for r in rows]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[r["abs_error"] for r in rows],
                name="|exact error|",
                mode="lines+markers",
                line={"color": "#d62728", "width": 3},
                legendgroup="err",
                showlegend=j == 1,
            ),
            row=1,
            col=j,
        )
        for c, bid in zip(palette, show):
            ys = [r["bounds"].get(bid) for r in rows]
            if all(v is None for v in ys):
                continue
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=ys,
                    name=bid,
                    mode="lines",
                    line={"color": c, "dash": "dot" if bid != "best" else "solid"},
                    legendgroup=bid,
                    showlegend=j == 1,
                ),
                row=1,
                col=j,
            )
        fig.update_xaxes(type="log", title_text="ε = max token TV", row=1, col=j)
    fig.update_yaxes(type="log", title_text="|J(π_θ) − J(π_roll) − L| and bounds", row=1, col=1)
    fig.update_layout(
        title=f"Bound tightness with real numbers (V={result['V']}, T={result['T']}, "
        f"reward={result['reward']}, constants={result['constants']})",
        height=480,
        width=1300,
    )
    return fig


def run(out_dir: str | None = None, **kw) -> dict:
    """:func:`sweep` for both constant sets; writes ``tightness.json`` and ``tightness.html`` into ``out_dir``."""
    import json
    import os

    res = {c: sweep(constants=c, **kw) for c in ("paper", "tight")}
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "tightness.json"), "w") as f:
            json.dump(
                res, f, indent=1, default=lambda v: None if isinstance(v, float) and not math.isfinite(v) else str(v)
            )
        from workers.training.plotting import write_html

        write_html(figure(res["tight"]), os.path.join(out_dir, "tightness.html"))
        with open(os.path.join(out_dir, "tightness_figure.json"), "w") as f:
            f.write(figure(res["tight"]).to_json())
    return res
