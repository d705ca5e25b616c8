"""The optional MoE routing fields of an fcr/1 record (docs/routing.md, "In the run log"):

* ``rollout.routed_experts``: ``[tokens][layers][top_k]`` expert ids the engine chose for each response token
  (negative = not recorded at that token and layer);
* ``rollout.router_topk_probs``: the router's probabilities of those experts, same shape, each in [0, 1];
* ``trainer.routed_experts``: the experts the trainer used (recomputed or replayed), same shape as the rollout's;
* ``trainer.routing_replay``: the trainer's declared replay mode, ``none`` | ``R2`` | ``R3`` (null = undeclared);
* ``model.num_experts``: experts per layer, for the range check.

:func:`routes_issues` checks them: integer ids (no booleans), a ``[tokens, layers, top_k]`` shape whose token count
is the response's, ids below ``model.num_experts``, no expert twice in one selection, trainer and rollout shapes
equal, probabilities finite and in [0, 1]. The layer count being constant within a model is a file-level rule
(:class:`LayerCounts`). No Django import.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

REPLAY_MODES = frozenset({"none", "R2", "R3"})
_INT = frozenset({int})
_NUM = frozenset({int, float})


def has_routes(rec: dict) -> bool:
    ro, tr, model = rec.get("rollout"), rec.get("trainer"), rec.get("model")
    return bool(
        (isinstance(ro, dict) and (ro.get("routed_experts") is not None or ro.get("router_topk_probs") is not None))
        or (isinstance(tr, dict) and (tr.get("routed_experts") is not None or tr.get("routing_replay") is not None))
        or (isinstance(model, dict) and model.get("num_experts") is not None)
    )


class RoutingDataError(ValueError):
    """Routes that cannot be compared: ``call_id`` and ``field`` name the record and the array, the message says why."""

    def __init__(self, call_id, field: str, reason: str):
        super().__init__(f"call {call_id!r}: {field}: {reason}")
        self.call_id, self.field, self.reason = call_id, field, reason


def as_routes(x, call_id, field: str, *, n_experts: int | None = None) -> np.ndarray:
    """``x`` as an int64 array ``[tokens, layers, top_k]`` after checking its shape, that ids are below
    ``n_experts`` (when known) and that no expert appears twice in one selection. Negative ids mean not recorded;
    a selection must be recorded whole or not at all."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:  # ragged nested lists
        raise RoutingDataError(call_id, field, f"not a rectangular [tokens, layers, top_k] array ({e})") from None
    if a.ndim != 3:
        raise RoutingDataError(
            call_id, field, f"expected [tokens, layers, top_k], got {a.ndim} dimension(s) {list(a.shape)}"
        )
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise RoutingDataError(call_id, field, f"expert ids must be integers, got {a.dtype}")
    if a.shape[1] < 1 or a.shape[2] < 1:
        raise RoutingDataError(
            call_id, field, f"needs at least one layer and one expert per token, got {list(a.shape)}"
        )
    a = a.astype(np.int64, copy=False)
    if not a.size:
        return a
    if n_experts is not None and a.max() >= n_experts:
        t, l, _ = np.argwhere(a >= n_experts)[0]
        raise RoutingDataError(
            call_id,
            f"{field}[{t}][{l}]",
            f"expert id {int(a[t, l].max())} out of range: the model has {n_experts} experts",
        )
    neg = a < 0
    part = neg.any(-1) & ~neg.all(-1)
    if part.any():
        t, l = np.argwhere(part)[0]
        raise RoutingDataError(
            call_id, f"{field}[{t}][{l}]", "partly recorded selection (some ids negative); record all top_k ids or none"
        )
    if a.shape[2] > 1:
        s = np.sort(a, -1)
        dup = ((s[..., 1:] == s[..., :-1]) & (s[..., 1:] >= 0)).any(-1)
        if dup.any():
            t, l = np.argwhere(dup)[0]
            raise RoutingDataError(
                call_id, f"{field}[{t}][{l}]", f"the same expert is selected twice: {a[t, l].tolist()}"
            )
    return a


def _leaf_types(a):
    """Types of the innermost elements of a nested list ``[T][L][K]``; None when it is not three levels of lists."""
    try:
        if type(a) is not list or not all(type(x) is list for x in a):
            return None
        rows = list(chain.from_iterable(a))
        if not all(type(x) is list for x in rows):
            return None
        return set(map(type, chain.from_iterable(rows)))
    except TypeError:
        return None


def routes_array(a, n: int, field: str, num_experts):
    """``(int64 array [n, L, K], None)`` or ``(None, (field, reason))``."""
    if n == 0 and (isinstance(a, list) and not a or isinstance(a, np.ndarray) and not a.size):
        return np.zeros((0, 1, 1), np.int64), None  # no tokens, nothing routed
    if isinstance(a, np.ndarray):
        types = _INT if np.issubdtype(a.dtype, np.integer) else {a.dtype.type}
    else:
        types = _leaf_types(a)
        if types is None:
            return None, (field, "expected a [tokens][layers][top_k] list of expert ids")
    if types and not types <= _INT:
        bad = sorted(t.__name__ for t in types - _INT)
        return None, (field, f"expert ids must be ints, got {', '.join(bad)}")
    try:
        arr = as_routes(a, None, field, n_experts=num_experts)
    except RoutingDataError as e:
        return None, (e.field, e.reason)
    if arr.shape[0] != n:
        return None, (field, f"{arr.shape[0]} token rows, but response.token_ids has {n} tokens")
    return arr, None


def routes_issues(rec: dict, n: int) -> list[tuple[str, str]]:
    """``(field, reason)`` for each problem with the record's routing fields (``n`` = response length)."""
    out = []
    model, ro, tr = rec.get("model"), rec.get("rollout"), rec.get("trainer")
    ne = model.get("num_experts") if isinstance(model, dict) else None
    if ne is not None and (type(ne) is not int or ne < 1):
        out.append(("model.num_experts", f"expected a positive int or null, got {ne!r}"))
        ne = None
    shapes = {}
    for side, block in (("rollout", ro), ("trainer", tr)):
        if not isinstance(block, dict) or block.get("routed_experts") is None:
            continue
        arr, problem = routes_array(block["routed_experts"], n, f"{side}.routed_experts", ne)
        if problem:
            out.append(problem)
        else:
            shapes[side] = arr.shape
    if len(shapes) == 2 and shapes["rollout"] != shapes["trainer"]:
        out.append(
            (
                "trainer.routed_experts",
                f"shape {list(shapes['trainer'])} differs from rollout.routed_experts {list(shapes['rollout'])}",
            )
        )
    if isinstance(ro, dict) and ro.get("router_topk_probs") is not None:
        p = ro["router_topk_probs"]
        if ro.get("routed_experts") is None:
            out.append(("rollout.router_topk_probs", "given without rollout.routed_experts"))
        else:
            types = _leaf_types(p) if not isinstance(p, np.ndarray) else _NUM
            if types is None or not types <= _NUM:
                out.append(("rollout.router_topk_probs", "expected a [tokens][layers][top_k] list of numbers"))
            else:
                try:
                    pa = np.asarray(p, dtype=np.float64)
                except ValueError:
                    pa = None
                if pa is None or ("rollout" in shapes and pa.shape != shapes["rollout"]):
                    out.append(
                        (
                            "rollout.router_topk_probs",
                            f"shape {None if pa is None else list(pa.shape)} differs from rollout.routed_experts",
                        )
                    )
                elif pa.size and not (np.isfinite(pa).all() and pa.min() >= 0 and pa.max() <= 1):
                    t, layer, _ = np.argwhere(~(np.isfinite(pa) & (pa >= 0) & (pa <= 1)))[0]
                    out.append((f"rollout.router_topk_probs[{t}][{layer}]", "probabilities must be in [0, 1]"))
    if isinstance(tr, dict):
        mode = tr.get("routing_replay")
        if mode is not None and (type(mode) is not str or mode not in REPLAY_MODES):
            out.append(("trainer.routing_replay", f"expected none, R2, R3 or null, got {mode!r}"))
    return out


def route_shape(rec: dict) -> tuple[int, int] | None:
    """``(layers, top_k)`` of a well-formed record's routes (None without routes or tokens)."""
    for side in ("rollout", "trainer"):
        block = rec.get(side)
        r = block.get("routed_experts") if isinstance(block, dict) else None
        if r is not None:
            if isinstance(r, np.ndarray):
                return (int(r.shape[1]), int(r.shape[2])) if r.ndim == 3 and r.shape[0] else None
            return (len(r[0]), len(r[0][0]) if r[0] else 0) if r else None
    return None


def n_layers(rec: dict) -> int | None:
    """Layer count of a well-formed record's routes (None without routes)."""
    shape = route_shape(rec)
    return None if shape is None else shape[0]


class LayerCounts:
    """The file-level rule: every routed record of one model (``model.served_name``) has the same number of routed
    layers and the same top_k as the model's first one — the routing audit (:mod:`workers.routing`) refuses the same
    records, model by model. ``seen`` maps a model to ``(layers, line, top_k)``."""

    def __init__(self):
        self.seen: dict = {}

    def check(self, rec: dict, line: int) -> str | None:
        shape = route_shape(rec)
        if shape is None:
            return None
        L, K = shape
        model = rec.get("model") or {}
        name = model.get("served_name")
        first = self.seen.setdefault(name, (L, line, K))
        if first[0] != L:
            return (
                f"{L} routed layers, but model {name!r} had {first[0]} at line {first[1]}; the layer count is "
                f"constant within a model"
            )
        if len(first) > 2 and first[2] != K:
            return f"top_k {K}, but model {name!r} had {first[2]} at line {first[1]}; top_k is constant within a model"
        return None
