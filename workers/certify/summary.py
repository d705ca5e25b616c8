"""The run certificate of a (merged) partial: bounds at T_ref, budget thresholds, per-step rows, length buckets,
caveats and the summary (workers/certify/partial.py holds what is accumulated; this module only reads it).

``summarise(part, plan)`` is the last step of ``certify_file`` and of every merge of pieces (docs/certify.md, *Partial
certificates*); everything it reads from a :class:`~workers.certify.partial.Partial` is exact or order-independent,
so its output depends only on the file and the plan.
"""

from __future__ import annotations

import math

from workers.certify.bounds import BOUND_IDS, KL_PARAMETERISED, budget_threshold, simplified_bounds, trm_bounds
from workers.certify.partial import Partial
from workers.certify.sequence import LENGTH_EDGES, VISITED_CAVEAT, length_bucket
from workers.certify.step_metrics import StepMetrics
from workers.jsonsafe import finite_or_none


def summarise(part: Partial, plan: dict) -> dict:
    """The run certificate of a (merged) partial under ``plan`` (:func:`plan_certificate`)."""
    return _summarise(part, plan["opts"], plan["budget"], plan["threshold_source"], plan["T_ref"])


def _summarise(run, opts, budget, threshold_source, T_ref_opt):
    n_ok = run.ok_sequences
    T_ref = max(run.T_ref, int(T_ref_opt or 0))
    eps_hat = run.eps_max if n_ok else None
    delta_hat = run.delta_max if (n_ok and math.isfinite(run.delta_max)) else None
    bounds, simplified = {}, {}
    mean_A = None
    if n_ok:
        prof = run.profile.values() / n_ok
        bounds = trm_bounds(
            T_ref,
            eps=eps_hat,
            delta=delta_hat,
            kl_seq=(run.total("kl_seq") / n_ok) if delta_hat is not None else None,
            tv_seq=run.total("tv_seq") / n_ok,
            tv_profile=prof,
            constants=opts["constants"],
            reward_range=opts["reward_range"],
        )
        simplified = simplified_bounds(
            T_ref, eps=eps_hat, delta=delta_hat, constants=opts["constants"], reward_range=opts["reward_range"]
        )
        mean_A = bounds.get("adap_star", bounds.get("adap_tv"))
    budget_out = None
    if budget is not None:
        ths = {}
        for bid in BOUND_IDS:
            try:
                ths[bid] = finite_or_none(
                    budget_threshold(
                        bid, max(T_ref, 1), budget, constants=opts["constants"], reward_range=opts["reward_range"]
                    )
                )
            except ValueError:
                ths[bid] = None
        budget_out = {
            "budget": float(budget),
            "T_ref": T_ref,
            "thresholds": ths,
            "parameter": {bid: ("delta" if bid in KL_PARAMETERISED else "eps") for bid in BOUND_IDS},
            "measured_best": finite_or_none(bounds.get("best")),
            "measured_argmin": bounds.get("argmin"),
            "within_budget": bool(bounds) and bounds["best"] <= budget,
            "note": "thresholds: largest per-token eps (or delta) keeping each bound <= budget at T_ref, worst "
            "case for everything not measured; null = no constraint needed (delta unbounded)",
        }
    steps = []
    for step in sorted(run.steps, key=lambda s: (s is None, s if s is not None else 0)):
        s = run.steps[step]
        steps.append(
            {
                "step": step,
                "sequences": s["sequences"],
                "tokens": s["tokens"],
                "accepted": s["accepted"],
                "acceptance_rate": s["accepted"] / s["sequences"] if s["sequences"] else None,
                "eps_hat_max": s["eps_max"] if s["eps_n"] else None,
                "eps_hat_mean": run.step_total(s, "eps") / s["eps_n"] if s["eps_n"] else None,
                "delta_hat": finite_or_none(s["delta_max"]) if s["eps_n"] else None,
                "mean_k3": run.step_total(s, "k3") / s["ok_tokens"] if s["ok_tokens"] else None,
                "status_counts": s["status"],
                "metrics": run.metrics.step(step),
            }
        )
    order = [length_bucket(e) for e in LENGTH_EDGES] + [f">{LENGTH_EDGES[-1]}"]
    buckets = [
        {
            "bucket": k,
            "sequences": run.buckets[k][0],
            "accepted": run.buckets[k][1],
            "acceptance_rate": run.buckets[k][1] / run.buckets[k][0],
        }
        for k in order
        if k in run.buckets
    ]
    caveats = [VISITED_CAVEAT]
    if not n_ok:
        caveats.append(
            "No policy sequence could be certified: the run certificate is empty (a requested threshold "
            "or budget counts as failed)."
        )
    if n_ok and delta_hat is None:
        caveats.append(
            "KL unbounded: "
            + ("trainer top-K only" if run.has_topk_q else "sampled-token log-probs only")
            + " — no finite token KL can be certified (docs/intervals.md#kl-bounds); delta_hat is null and "
            "every KL-based bound (classical_kl, pm_*, mix_kl, adap_kl, adap_star) is absent."
        )
    if n_ok and not (run.has_topk_p or run.has_topk_q):
        caveats.append(
            "No top-K lists: token TV is certified only as [|p_y - q_y|, 1 - min(p_y, q_y)]; small TV is "
            "certifiable only where the sampled token dominates both sides."
        )
    if opts["caps"] and (run.has_topk_p or run.has_topk_q):
        caveats.append(
            "Top-K caps assume rollout.top_k is the engine's true top-K (descending); pass caps=False "
            "if it is not. trainer.top_k is treated as an arbitrary subset (fcr/1: the trainer's values on "
            "the rollout's ids, possibly more), so no trainer cap is assumed."
        )
    caveats.append(
        f"Logged log-probs are assumed accurate to the declared storage precision "
        f"({'eta=' + str(opts['eta']) if opts['eta'] is not None else opts['precision']}); intervals are "
        f"widened accordingly (docs/intervals.md#error-robust-widening); values no distribution within "
        f"that precision can produce (listed mass above 1, two readings of one token that disagree) "
        f"are DATA_ERROR, never certified."
    )
    if run.uncovered_seqs:
        line, cid = run.uncovered_first
        caveats.append(
            f"{run.uncovered_seqs} sequence(s) (first: line {line}, call {cid}) have a trainer.top_k that "
            f"misses ids of rollout.top_k at {run.uncovered_positions} position(s); fcr/1 requires the "
            f"trainer list to cover them, and the certificate there is looser (the missing trainer values "
            f"are treated as unknown)."
        )
    if run.seq_counts["DATA_ERROR"]:
        caveats.append(
            f"{run.seq_counts['DATA_ERROR']} sequence(s) with DATA_ERROR are rejected (fail closed) and "
            f"excluded from eps_hat, delta_hat and the bounds."
        )
    if opts["mode"] in ("k2max", "k3mean"):
        caveats.append(
            f"Mode {opts['mode']} is a heuristic (verl seq_max_k2 / seq_mean_k3): accept decisions are "
            f"not certificates (status HEURISTIC)."
        )
    if run.skipped:
        caveats.append(
            "Skipped without certification: " + ", ".join(f"{v} {k}" for k, v in sorted(run.skipped.items())) + "."
        )
    if bounds and bounds.get("best", 0) >= 1.0:
        caveats.append(
            "B* >= 1: with rewards in [0, 1] the bound cannot certify improvement (docs/bounds.md#unified-bound-b)."
        )
    summary = {
        "records": run.records,
        "policy_records": run.policy,
        "skipped": dict(sorted(run.skipped.items())),
        "sequences": run.sequences,
        "sequences_certified": n_ok,
        "tokens": run.tokens,
        "status_counts": {"tokens": run.tok_counts, "sequences": run.seq_counts},
        "accepted": run.accepted,
        "acceptance_rate": run.accepted / run.sequences if run.sequences else None,
        "eps_hat": finite_or_none(eps_hat),
        "eps_hat_mean": run.total("eps") / n_ok if n_ok else None,
        "tv_lo_max": run.tv_lo_max if n_ok else None,
        "delta_hat": finite_or_none(delta_hat),
        "T_ref": T_ref,
        "mean_A_y": finite_or_none(mean_A),
        "mean_A_y_own_weights": run.total("A") / n_ok if n_ok else None,
        "kl_seq_mean": finite_or_none(run.total("kl_seq") / n_ok) if (n_ok and delta_hat is not None) else None,
        "tv_seq_mean": run.total("tv_seq") / n_ok if n_ok else None,
        "mean_k3": run.total("k3") / run.ok_tokens if run.ok_tokens else None,
        "threshold": opts["threshold"],
        "threshold_source": threshold_source,
        "threshold_passed": bool(n_ok)
        and run.seq_counts["DATA_ERROR"] == 0
        and eps_hat is not None
        and (
            (eps_hat <= opts["threshold"])
            if opts["mode"] == "tv"
            else (delta_hat is not None and delta_hat <= opts["threshold"])
            if opts["mode"] == "kl"
            else run.accepted == run.sequences
        ),
        "data_errors": run.errors_total,
        "metrics": run.metrics.run(),
        "metrics_options": StepMetrics.options(),
    }
    options = {k: v for k, v in opts.items()}
    options.update({"budget": budget, "T_ref": T_ref_opt})
    return {
        "summary": summary,
        "bounds": {k: (finite_or_none(v) if k != "argmin" else v) for k, v in bounds.items()},
        "bounds_simplified": {k: (finite_or_none(v) if k != "valid" else v) for k, v in simplified.items()},
        "budget": budget_out,
        "steps": steps,
        "length_buckets": buckets,
        "errors": run.first_errors(),
        "caveats": caveats,
        "options": options,
    }
