"""The routing audit of a whole run log (fcr/1 JSONL, plain or gzip, or fcr-parquet/1), streamed record by record.

Every record must pass the fcr/1 format check (``workers.fcr.validate.validate_record``, which includes the routing
fields of ``workers/fcr/routes.py``) and keep its model's layer count; the first one that does not stops the audit
with a :class:`RoutingFileError` naming its line (row), call and field. Policy calls are audited (background calls
are not trained on); per-token values for the attribution come from the same record:

* ``abs_dlogp`` = |trainer − rollout| log-prob of the sampled token (where both are logged);
* ``tv_lo``/``tv_hi``: the certificate's interval (``workers.certify.intervals.tv_interval_topk``, Theorem A at the
  declared precision) when both top-K lists are logged, else what the sampled token alone proves:
  |p(y) − q(y)| ≤ TV ≤ 1 − min(p(y), q(y));
* ``accepted``: ``tv_hi`` ≤ the threshold (the certificate's TV-mode default unless given).

No Django import.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from workers.fcr.reader import FcrParseError
from workers.routing.audit import RoutingAudit, RoutingDataError, TokenMetrics

DEFAULT_THRESHOLD = 0.15  # = workers.certify.sequence.DEFAULT_THRESHOLDS["tv"], the certificate's default


class RoutingFileError(ValueError):
    """A record the routing audit cannot read: ``line``, ``call_id``, ``field`` and ``reason``."""

    def __init__(self, line: int, call_id, field: str, reason: str):
        super().__init__(f"line {line} (call {call_id}): {field}: {reason}" if field else f"line {line}: {reason}")
        self.line, self.call_id, self.field, self.reason = line, call_id, field, reason


def iter_run_records(path):
    """``(line or row number, record)`` of an fcr/1 JSONL or fcr-parquet/1 file, through the one door for run logs
    (workers/fcr/source.py; Parquet routes stay numpy)."""
    from workers.fcr.source import RunLogSource

    return RunLogSource(path).records(numpy_routes=True)


def _lp(values, n):
    if values is None:
        return None
    return (
        np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        if None in values
        else np.asarray(values, dtype=np.float64).reshape(n)
    )


def token_metrics(rec: dict, *, threshold: float = DEFAULT_THRESHOLD, precision: str = "fp32") -> TokenMetrics | None:
    """The per-token values of one well-formed record (None when the trainer's log-probs are absent)."""
    n = len(rec["response"]["token_ids"])
    tr = rec.get("trainer") or {}
    a, b = _lp(rec["rollout"].get("logprobs"), n), _lp(tr.get("logprobs"), n)
    if a is None or b is None or n == 0:
        return None
    p, q = np.exp(a), np.exp(b)
    tv_lo, tv_hi = np.abs(p - q), 1.0 - np.minimum(p, q)
    rt, tt = rec["rollout"].get("top_k"), tr.get("top_k")
    if rt is not None and tt is not None and all(rt) and all(tt):
        import torch

        from workers.certify.intervals import tv_interval_topk
        from workers.fcr.validate import topk_arrays

        pi, pl, _ = topk_arrays(rt, n)
        qi, ql, _ = topk_arrays(tt, n)
        y = torch.as_tensor(np.asarray(rec["response"]["token_ids"], dtype=np.int64))
        res = tv_interval_topk(
            torch.as_tensor(pi),
            torch.as_tensor(np.nan_to_num(pl, nan=-np.inf)),
            torch.as_tensor(qi),
            torch.as_tensor(np.nan_to_num(ql, nan=-np.inf)),
            y,
            torch.as_tensor(np.nan_to_num(a, nan=0.0)),
            torch.as_tensor(np.nan_to_num(b, nan=0.0)),
            precision=precision,
        )
        ok = (res.err.numpy() == 0) & np.isfinite(a) & np.isfinite(b)
        tv_lo = np.where(ok, res.lo.numpy(), tv_lo)
        tv_hi = np.where(ok, res.hi.numpy(), tv_hi)
    bad = ~(np.isfinite(a) & np.isfinite(b))
    tv_lo[bad] = tv_hi[bad] = np.nan
    return TokenMetrics(
        tv_hi=tv_hi, tv_lo=tv_lo, abs_dlogp=np.abs(b - a), accepted=np.where(bad, False, tv_hi <= threshold)
    )


def audit_file(
    path,
    *,
    min_flipped_layers: int = 2,
    threshold: float = DEFAULT_THRESHOLD,
    precision: str = "fp32",
    progress: Callable[[int], None] | None = None,
) -> dict:
    """The routing audit of a run log (see :class:`workers.routing.audit.RoutingAudit` for the report's fields) plus
    ``records``, ``policy_records``, ``seconds`` and the options used."""
    from workers.fcr.validate import validate_record

    audits: dict = {}  # one audit per model (model.served_name): layers and top_k are constant within a model
    t0 = time.perf_counter()
    records = policy = 0
    try:
        for line, rec in iter_run_records(path):
            records += 1
            errs = [i for i in validate_record(rec, line=line, lint=False) if i.severity == "error"]
            if errs:
                e = errs[0]
                raise RoutingFileError(line, e.call_id, e.field, e.reason)
            if rec["role"] != "policy":
                continue
            policy += 1
            ro, tr = rec["rollout"], rec.get("trainer") or {}
            name = (rec.get("model") or {}).get("served_name")
            audit = audits.get(name) or audits.setdefault(name, RoutingAudit(min_flipped_layers=min_flipped_layers))
            try:
                audit.add_call(
                    rec["call_id"],
                    rollout=ro.get("routed_experts"),
                    trainer=tr.get("routed_experts"),
                    replay=tr.get("routing_replay"),
                    n_experts=(rec.get("model") or {}).get("num_experts"),
                    n_tokens=len(rec["response"]["token_ids"]),
                    metrics=token_metrics(rec, threshold=threshold, precision=precision),
                    checked=True,
                )
            except RoutingDataError as e:
                raise RoutingFileError(line, e.call_id, e.field, e.reason) from None
            if progress is not None:
                progress(records)
    except FcrParseError as e:
        raise RoutingFileError(e.line, None, e.field or "", e.reason) from None
    out = (
        combine({name: a.result() for name, a in audits.items()})
        if audits
        else RoutingAudit(min_flipped_layers=min_flipped_layers).result()
    )
    out.update(
        records=records,
        policy_records=policy,
        seconds=time.perf_counter() - t0,
        options={"min_flipped_layers": min_flipped_layers, "threshold": threshold, "precision": precision},
    )
    return out


_SUMMED = (
    "calls",
    "calls_with_routes",
    "pairs",
    "pairs_verified",
    "pairs_flipped",
    "tokens",
    "tokens_agree",
    "tokens_flipped",
    "tokens_unverifiable",
    "tokens_without_routes",
)
_REPLAY_ORDER = ("FAIL", "UNVERIFIABLE", "PASS", "NOT_DECLARED")


def combine(by_model: dict) -> dict:
    """The report of a log that routes one or several models: each model is audited on its own (``models``, by
    ``model.served_name``); with one model the report is that model's, with several the counts are summed, the
    rates recomputed from the sums (the expert swap rate over each model's own top_k), the per-layer and
    per-position tables left to each model, and the replay state is the worst of the models' (FAIL, then
    UNVERIFIABLE, then PASS)."""
    names = list(by_model)
    models = {str(n): r for n, r in by_model.items()}
    if len(names) == 1:
        return dict(
            by_model[names[0]],
            models={
                str(names[0]): {
                    "layers": by_model[names[0]]["layers"],
                    "top_k": by_model[names[0]]["top_k"],
                    "calls": by_model[names[0]]["calls"],
                }
            },
        )
    rs = list(by_model.values())
    out = {k: sum(r[k] for r in rs) for k in _SUMMED}
    swapped = sum((r["expert_swap_rate"] or 0.0) * r["pairs_verified"] * (r["top_k"] or 0) for r in rs)
    slots = sum(r["pairs_verified"] * (r["top_k"] or 0) for r in rs)

    def rate(a, b):
        return a / b if b else None

    replays = [r["replay"] for r in rs]
    worst = min(replays, key=lambda v: _REPLAY_ORDER.index(v["state"]))
    out.update(
        layers=None,
        top_k=None,
        calls_by_replay_mode={
            m: sum(r["calls_by_replay_mode"].get(m, 0) for r in rs) for m in rs[0]["calls_by_replay_mode"]
        },
        flip_rate=rate(out["pairs_flipped"], out["pairs_verified"]),
        expert_swap_rate=rate(swapped, slots),
        token_flip_share=rate(out["tokens_flipped"], out["tokens_agree"] + out["tokens_flipped"]),
        coverage={
            "pairs": rate(out["pairs_verified"], out["pairs"]),
            "tokens": rate(out["tokens_agree"] + out["tokens_flipped"], out["tokens"]),
        },
        per_layer=[],
        per_position=None,
        tokens_by_flipped_layers=[],
        layer_position_grid=None,
        attribution=None,
        replay=dict(
            worst,
            reason=f"{len(rs)} models: " + "; ".join(f"{n}: {v['state']}" for n, v in zip(models, replays)),
            r3_calls=sum(v["r3_calls"] for v in replays),
            failed_calls=sum(v["failed_calls"] for v in replays),
            unverifiable_calls=sum(v["unverifiable_calls"] for v in replays),
            verified_calls=sum(v["verified_calls"] for v in replays),
            failed=[dict(f, model=n) for n, v in zip(models, replays) for f in v["failed"]],
            unverifiable=[dict(u, model=n) for n, v in zip(models, replays) for u in v["unverifiable"]],
            failed_layers=None,
        ),
        models=models,
    )
    return out
