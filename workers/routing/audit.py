"""Routing audit of Mixture-of-Experts runs: where the trainer's expert choices differ from the rollout's, whether a
declared replay held, and how much of the measured divergence the flipped tokens carry (docs/routing.md).

Inputs are per call: the rollout's routed experts and the trainer's (recomputed or replayed), each an integer array
``[tokens, layers, top_k]``; a negative id marks an entry that was not recorded. Everything is vectorised numpy;
memory is bounded by the largest call plus fixed-size accumulators (per layer, per position, a binned layer × position
grid, fixed-bin histograms for quantiles). No Django import.

* A (token, layer) pair is **verified** when both sides recorded all ``top_k`` ids there, and **flipped** when the two
  sets of experts differ (order ignored). ``n_diff`` = |rollout set \\ trainer set| is the number of experts swapped.
* A token is **agree** (verified at every layer, no flip), **flipped** (a flip at one or more verified layers) or
  **unverifiable** (no flip seen, but at least one layer missing on one side): missing data is never counted as
  agreement.
* Replay verdict: among calls that declare ``R3`` (the trainer replays the rollout's routes), any flip is a FAIL
  naming the calls and layers; no flip but missing routes is UNVERIFIABLE; otherwise PASS. ``R2`` and ``none`` calls
  are measured, never failed (their trainer routes are expected to differ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from workers.certify.step_metrics import N_BINS, StepMetrics, log_bin
from workers.fcr.routes import RoutingDataError, as_routes  # the record's route rules live with the format

REPLAY_MODES = ("none", "R2", "R3")
MAX_NAMED = 50  # failing calls listed in full; the count is always exact
POS_CAP = 1 << 16  # exact per-position counts up to this position; later positions share the last entry


def compare_routes(rollout: np.ndarray, trainer: np.ndarray, call_id=None):
    """``(flipped, verified, n_diff)``, each ``[tokens, layers]``: see the module docstring. Both arrays must have the
    same shape (already checked by :func:`as_routes`)."""
    if rollout.shape != trainer.shape:
        raise RoutingDataError(
            call_id,
            "trainer.routed_experts",
            f"shape {list(trainer.shape)} differs from the rollout's {list(rollout.shape)}",
        )
    verified = (rollout[..., 0] >= 0) & (trainer[..., 0] >= 0)
    # sets compared as sorted rows; |R \ T| only where they differ (few pairs): each rollout id looked up among the
    # trainer's ids, O(K²) per flipped pair
    flipped = verified & (np.sort(rollout, -1) != np.sort(trainer, -1)).any(-1)
    n_diff = np.zeros(flipped.shape, np.int64)
    idx = np.nonzero(flipped)
    if idx[0].size:
        r, t = rollout[idx], trainer[idx]
        n_diff[idx] = (~(r[:, :, None] == t[:, None, :]).any(-1)).sum(-1)
    return flipped, verified, n_diff


GRID_BINS = 18  # position bins of the layer × position grid; the last one holds every position from 2^16 on


def pos_bin(pos: np.ndarray) -> np.ndarray:
    """Position bin of the layer × position grid: 0 for position 0, then k for positions in [2^(k−1), 2^k)."""
    b = np.where(pos > 0, np.floor(np.log2(np.maximum(pos, 1))).astype(np.int64) + 1, 0)
    return np.minimum(b, GRID_BINS - 1)


@dataclass(frozen=True)
class TokenMetrics:
    """Per-token mismatch values of one call's response, aligned with its routes (NaN = not certified there).

    ``tv_hi``: certified upper end of the per-token TV (ε̂ is its maximum); ``tv_lo``: lower end; ``abs_dlogp``:
    |trainer − rollout| log-prob of the sampled token; ``accepted``: the token is inside the trust region."""

    tv_hi: np.ndarray | None = None
    tv_lo: np.ndarray | None = None
    abs_dlogp: np.ndarray | None = None
    accepted: np.ndarray | None = None


GROUPS = ("agree", "flipped", "unverifiable")  # a partition of the tokens; "flipped_ge_n" is a subset of flipped
_SUM_FIELDS = ("tv_hi", "tv_lo", "abs_dlogp")


class _Group:
    def __init__(self):
        self.tokens = 0
        self.sums = {k: [] for k in _SUM_FIELDS}  # per-call float sums, added with math.fsum at the end
        self.n = dict.fromkeys(_SUM_FIELDS, 0)
        self.max = dict.fromkeys(_SUM_FIELDS, -math.inf)
        self.accepted = 0
        self.n_accept = 0
        self.hist = np.zeros(N_BINS, np.int64)

    def add(self, sel: np.ndarray, m: TokenMetrics):
        self.tokens += int(sel.sum())
        for k in _SUM_FIELDS:
            v = getattr(m, k)
            if v is None:
                continue
            v = v[sel]
            v = v[np.isfinite(v)]
            if v.size:
                self.sums[k].append(math.fsum(v.tolist()))
                self.n[k] += v.size
                self.max[k] = max(self.max[k], float(v.max()))
                if k == "abs_dlogp":
                    self.hist += np.bincount(log_bin(v), minlength=N_BINS)
        if m.accepted is not None:
            a = m.accepted[sel]
            self.accepted += int(np.count_nonzero(a))
            self.n_accept += a.size

    def finish(self) -> dict:
        out = {"tokens": self.tokens}
        for k in _SUM_FIELDS:
            if self.n[k]:
                s = math.fsum(self.sums[k])
                out[k] = {"n": self.n[k], "sum": s, "mean": s / self.n[k], "max": self.max[k]}
        if self.n["tv_hi"]:
            out["eps_hat"] = self.max["tv_hi"]
        if self.n["abs_dlogp"]:
            q = StepMetrics._quantile
            out["abs_dlogp"].update(p50=q(self.hist, 0.5), p90=q(self.hist, 0.9), p99=q(self.hist, 0.99))
        if self.n_accept:
            out["acceptance"] = {"accepted": self.accepted, "n": self.n_accept, "rate": self.accepted / self.n_accept}
        return out


class RoutingAudit:
    """Accumulates the routing audit call by call; :meth:`result` gives the JSON-safe report.

    ``min_flipped_layers`` is the N of the "flipped at ≥ N layers" attribution row."""

    def __init__(self, *, min_flipped_layers: int = 2):
        self.N = int(min_flipped_layers)
        self.layers = None
        self.top_k = None
        self.calls = 0
        self.calls_with_routes = 0
        self.calls_by_mode = dict.fromkeys(REPLAY_MODES + ("undeclared",), 0)
        self.pairs = self.pairs_verified = self.pairs_flipped = self.experts_swapped = 0
        self.tokens = self.tokens_agree = self.tokens_flipped = self.tokens_unverifiable = 0
        self.tokens_no_routes = 0
        self.layer_verified = self.layer_flipped = None
        self.pos_verified = np.zeros(0, np.int64)
        self.pos_flipped = np.zeros(0, np.int64)
        self.grid_verified = self.grid_flipped = None
        self.flipped_layers_hist = None  # tokens by number of flipped layers (verified tokens only)
        self.r3_failed: list = []
        self.r3_failed_calls = 0
        self.r3_failed_layers: set = set()
        self.r3_calls = self.r3_verified_calls = 0
        self.r3_unverifiable: list = []
        self.r3_unverifiable_calls = 0
        self.groups = {g: _Group() for g in GROUPS + ("flipped_ge_n", "all")}

    # ------------------------------------------------------------------ one call
    def _ensure_layers(self, L, K, call_id):
        if self.layers is None:
            self.layers, self.top_k = L, K
            self.layer_verified = np.zeros(L, np.int64)
            self.layer_flipped = np.zeros(L, np.int64)
            self.grid_verified = np.zeros((L, GRID_BINS), np.int64)
            self.grid_flipped = np.zeros((L, GRID_BINS), np.int64)
            self.flipped_layers_hist = np.zeros(L + 1, np.int64)
        elif L != self.layers:
            raise RoutingDataError(
                call_id,
                "rollout.routed_experts",
                f"{L} layers, but earlier calls of this model "
                f"have {self.layers}; the layer count is "
                f"constant within a model",
            )
        elif K != self.top_k:  # a swap rate over another k means nothing (it could pass 1)
            raise RoutingDataError(
                call_id,
                "rollout.routed_experts",
                f"top_k {K}, but earlier calls of this model have {self.top_k}; top_k is constant within a model",
            )

    def _grow_pos(self, T):
        n = min(T, POS_CAP)
        if n > self.pos_verified.size:
            self.pos_verified = np.pad(self.pos_verified, (0, n - self.pos_verified.size))
            self.pos_flipped = np.pad(self.pos_flipped, (0, n - self.pos_flipped.size))
        return n

    def add_call(
        self,
        call_id,
        *,
        rollout=None,
        trainer=None,
        replay: str | None = None,
        n_experts: int | None = None,
        n_tokens: int | None = None,
        metrics: TokenMetrics | None = None,
        checked: bool = False,
    ) -> dict:
        """Add one call. ``rollout``/``trainer``: routes ``[tokens, layers, top_k]`` or None (not recorded);
        ``replay``: the trainer's declared mode (None = undeclared); ``n_tokens``: the response length (checked
        against the routes; required when neither side is given); ``metrics``: per-token values for attribution;
        ``checked``: the routes already passed :func:`as_routes` (the fcr/1 format check calls it), so only their
        shapes are looked at here. Returns the call's own summary (flipped pairs, flipped layers)."""
        if replay is not None and replay not in REPLAY_MODES:
            raise RoutingDataError(
                call_id,
                "trainer.routing_replay",
                f"unknown replay mode {replay!r}; use one of {', '.join(REPLAY_MODES)}",
            )
        self.calls += 1
        self.calls_by_mode[replay or "undeclared"] += 1
        r, t, T = _call_routes(call_id, rollout, trainer, n_experts, n_tokens, checked)
        both = r is not None and t is not None
        if both:  # the two sides of one call first, then the call against the model
            flipped, verified, n_diff = compare_routes(r, t, call_id)
        for a in (r, t):
            if a is not None:
                self._ensure_layers(a.shape[1], a.shape[2], call_id)
        if not both:
            L = self.layers or 0
            flipped = verified = np.zeros((T, L), bool)
            n_diff = np.zeros((T, L), np.int64)
        routed = r is not None or t is not None
        if routed:
            self.calls_with_routes += 1
        self.tokens += T
        L = flipped.shape[1]
        if routed:
            self.pairs += T * L
        self.pairs_verified += int(verified.sum())
        self.pairs_flipped += int(flipped.sum())
        self.experts_swapped += int(n_diff.sum())
        if self.layers is not None and both:
            self._add_positions(T, L, verified, flipped)
        self._add_tokens(T, L, verified, flipped, both, routed, metrics, call_id)
        layers_flipped = np.flatnonzero(flipped.any(0)).tolist()
        summary = {
            "call_id": call_id,
            "tokens": T,
            "pairs_flipped": int(flipped.sum()),
            "layers_flipped": layers_flipped,
            "pairs_unverified": int(T * (self.layers or 0) - verified.sum()),
        }
        if replay == "R3":
            self._add_r3(summary, r is not None, t is not None)
        return summary

    def _add_positions(self, T: int, L: int, verified, flipped) -> None:
        """A call with both sides' routes: its verified and flipped pairs by layer, by position and on the grid."""
        self.layer_verified += verified.sum(0)
        self.layer_flipped += flipped.sum(0)
        n = self._grow_pos(T)
        pos = np.minimum(np.arange(T), POS_CAP - 1)
        self.pos_verified[:n] += np.bincount(pos, verified.sum(1), minlength=n).astype(np.int64)
        self.pos_flipped[:n] += np.bincount(pos, flipped.sum(1), minlength=n).astype(np.int64)
        cell = (pos_bin(np.arange(T))[:, None] + GRID_BINS * np.arange(L)[None, :]).ravel()
        for grid, m in ((self.grid_verified, verified), (self.grid_flipped, flipped)):
            grid += np.bincount(cell, m.ravel(), minlength=L * GRID_BINS).astype(np.int64).reshape(L, GRID_BINS)

    def _add_tokens(self, T, L, verified, flipped, both: bool, routed: bool, metrics, call_id) -> None:
        """The call's tokens by status (a partition: agree, flipped, unverifiable) and their metrics by group."""
        n_flip = flipped.sum(1)
        tok_flipped = n_flip > 0
        tok_full = verified.all(1) if both else np.zeros(T, bool)
        tok_agree = tok_full & ~tok_flipped
        tok_unver = ~tok_flipped & ~tok_full
        self.tokens_agree += int(tok_agree.sum())
        self.tokens_flipped += int(tok_flipped.sum())
        self.tokens_unverifiable += int(tok_unver.sum())
        if not routed:
            self.tokens_no_routes += T
        if self.flipped_layers_hist is not None and both:
            self.flipped_layers_hist += np.bincount(n_flip[tok_full | tok_flipped], minlength=L + 1)[: L + 1]
        if metrics is None:
            return
        m = _checked_metrics(metrics, T, call_id)
        for g, sel in (
            ("agree", tok_agree),
            ("flipped", tok_flipped),
            ("unverifiable", tok_unver),
            ("flipped_ge_n", n_flip >= self.N),
            ("all", np.ones(T, bool)),
        ):
            self.groups[g].add(sel, m)

    def _add_r3(self, summary: dict, rollout_routes: bool, trainer_routes: bool) -> None:
        """An R3 call: verified, failed (a flipped layer) or unverifiable (pairs without both sides)."""
        self.r3_calls += 1
        layers_flipped = summary["layers_flipped"]
        if layers_flipped:
            self.r3_failed_calls += 1
            self.r3_failed_layers.update(layers_flipped)
            if len(self.r3_failed) < MAX_NAMED:
                self.r3_failed.append({k: summary[k] for k in ("call_id", "pairs_flipped", "layers_flipped")})
        elif summary["pairs_unverified"]:
            self.r3_unverifiable_calls += 1
            if len(self.r3_unverifiable) < MAX_NAMED:
                self.r3_unverifiable.append(
                    {
                        "call_id": summary["call_id"],
                        "pairs_unverified": summary["pairs_unverified"],
                        "rollout_routes": rollout_routes,
                        "trainer_routes": trainer_routes,
                    }
                )
        else:
            self.r3_verified_calls += 1

    # ------------------------------------------------------------------ report
    def replay_verdict(self) -> dict:
        if not self.r3_calls:
            state = "NOT_DECLARED"
            reason = "no call declares R3 replay"
        elif self.r3_failed_calls:
            state = "FAIL"
            reason = (
                f"{self.r3_failed_calls} of {self.r3_calls} R3 call(s) were trained on routes that differ from "
                f"the rollout's, at layer(s) {', '.join(map(str, sorted(self.r3_failed_layers)))}"
            )
        elif self.r3_unverifiable_calls:
            state = "UNVERIFIABLE"
            reason = (
                f"{self.r3_unverifiable_calls} of {self.r3_calls} R3 call(s) lack rollout or replayed routes "
                f"at some token/layer; replay cannot be shown to have held there"
            )
        else:
            state = "PASS"
            reason = f"all {self.r3_calls} R3 call(s) replayed the rollout's routes at every token and layer"
        return {
            "state": state,
            "reason": reason,
            "r3_calls": self.r3_calls,
            "verified_calls": self.r3_verified_calls,
            "failed_calls": self.r3_failed_calls,
            "failed": self.r3_failed,
            "failed_layers": sorted(self.r3_failed_layers),
            "unverifiable_calls": self.r3_unverifiable_calls,
            "unverifiable": self.r3_unverifiable,
        }

    @staticmethod
    def _rate(num, den):
        return (num / den) if den else None

    def result(self) -> dict:
        rate = self._rate
        L = self.layers or 0
        per_layer = (
            []
            if not L
            else [
                {
                    "layer": i,
                    "verified": int(self.layer_verified[i]),
                    "flipped": int(self.layer_flipped[i]),
                    "flip_rate": rate(int(self.layer_flipped[i]), int(self.layer_verified[i])),
                }
                for i in range(L)
            ]
        )
        grid = None
        if L:
            used = int(np.flatnonzero(self.grid_verified.sum(0)).max() + 1) if self.grid_verified.any() else 0
            gv, gf = self.grid_verified[:, :used], self.grid_flipped[:, :used]
            bins = [[0, 0]] + [[1 << (k - 1), (1 << k) - 1] for k in range(1, used)]
            if used == GRID_BINS:
                bins[-1][1] = None  # the last bin is open-ended
            grid = {
                "position_bins": bins,
                "verified": gv.tolist(),
                "flipped": gf.tolist(),
                "flip_rate": np.where(gv > 0, gf / np.maximum(gv, 1), np.nan).round(6).tolist(),
            }
            grid["flip_rate"] = [[None if math.isnan(x) else x for x in row] for row in grid["flip_rate"]]
        attribution = {g: self.groups[g].finish() for g in GROUPS + ("flipped_ge_n", "all")}
        attribution["min_flipped_layers"] = self.N
        attribution["flipped_share"] = {
            k: rate(attribution["flipped"].get(k, {}).get("sum", 0.0), attribution["all"].get(k, {}).get("sum", 0.0))
            for k in _SUM_FIELDS
        }
        return {
            "layers": L,
            "top_k": self.top_k,
            "calls": self.calls,
            "calls_with_routes": self.calls_with_routes,
            "calls_by_replay_mode": self.calls_by_mode,
            "pairs": self.pairs + self.tokens_no_routes * L,
            "pairs_verified": self.pairs_verified,
            "pairs_flipped": self.pairs_flipped,
            "flip_rate": rate(self.pairs_flipped, self.pairs_verified),
            "expert_swap_rate": rate(self.experts_swapped, self.pairs_verified * (self.top_k or 0)),
            "tokens": self.tokens,
            "tokens_agree": self.tokens_agree,
            "tokens_flipped": self.tokens_flipped,
            "tokens_unverifiable": self.tokens_unverifiable,
            "tokens_without_routes": self.tokens_no_routes,
            "token_flip_share": rate(self.tokens_flipped, self.tokens_agree + self.tokens_flipped),
            "coverage": {
                "pairs": rate(self.pairs_verified, self.pairs + self.tokens_no_routes * L),
                "tokens": rate(self.tokens_agree + self.tokens_flipped, self.tokens),
            },
            "per_layer": per_layer,
            "per_position": {
                "verified": self.pos_verified.tolist(),
                "flipped": self.pos_flipped.tolist(),
                "last_position_pools_from": POS_CAP - 1,
            },
            "tokens_by_flipped_layers": [] if self.flipped_layers_hist is None else self.flipped_layers_hist.tolist(),
            "layer_position_grid": grid,
            "replay": self.replay_verdict(),
            "attribution": attribution,
        }


_METRIC_FIELDS = ("tv_hi", "tv_lo", "abs_dlogp", "accepted")


def _call_routes(call_id, rollout, trainer, n_experts, n_tokens, checked: bool):
    """``(rollout routes, trainer routes, T)``: each side as ``[T, layers, top_k]`` int64 or None (not recorded, or
    a zero-token response's), T the response length; raises :class:`RoutingDataError` when the length is unknown or
    a side's rows do not match ``n_tokens``."""
    if checked:
        r, t = (
            None if a is None or not np.size(a) else np.asarray(a, dtype=np.int64) for a in (rollout, trainer)
        )  # a zero-token response's routes: nothing to compare
    else:
        r = None if rollout is None else as_routes(rollout, call_id, "rollout.routed_experts", n_experts=n_experts)
        t = None if trainer is None else as_routes(trainer, call_id, "trainer.routed_experts", n_experts=n_experts)
    T = next((a.shape[0] for a in (r, t) if a is not None), n_tokens)
    if T is None:
        raise RoutingDataError(call_id, "response.token_ids", "response length unknown and no routes given")
    for a, f in ((r, "rollout.routed_experts"), (t, "trainer.routed_experts")):
        if a is not None and n_tokens is not None and a.shape[0] != n_tokens:
            raise RoutingDataError(call_id, f, f"{a.shape[0]} token rows, but the response has {n_tokens} tokens")
    return r, t, T


def _checked_metrics(metrics: TokenMetrics, T: int, call_id) -> TokenMetrics:
    """The call's per-token metrics as arrays, each of length T (else :class:`RoutingDataError`)."""
    for f in _METRIC_FIELDS:
        v = getattr(metrics, f)
        if v is not None and np.shape(v) != (T,):
            raise RoutingDataError(call_id, f, f"{np.shape(v)} values for {T} tokens")
    return TokenMetrics(
        *(None if getattr(metrics, f) is None else np.asarray(getattr(metrics, f)) for f in _METRIC_FIELDS)
    )
