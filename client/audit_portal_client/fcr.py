"""Trainer batches → ``fcr-parquet/1`` tables (the portal's columnar run log; docs/run-log-parquet.md).

A trainer holds a step as padded tensors: ``[B, T]`` log-probs with a response mask, ``[B, T, K]`` top-K lists. Each
contiguous run of mask = 1 in a row is one *policy call* (one assistant turn: a single-turn GRPO row is one call; a
multi-turn row with tool outputs masked out is one call per turn, whose prompt is everything before it). Only those
positions go to the log: padding and tokens the policy did not sample never reach the certificate.

The schema here must equal the portal's (workers/fcr/columnar.py; the repository's tests compare the two).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

FORMAT = "fcr-parquet/1"


def arrow_schema(float_type: str = "float32") -> pa.Schema:
    ft = {"float64": pa.float64(), "float32": pa.float32()}[float_type]
    i64, s = pa.int64(), pa.string()
    fields = [
        pa.field("run_id", s, nullable=False),
        pa.field("trajectory_id", s, nullable=False),
        pa.field("call_id", s, nullable=False),
        pa.field("step", i64, nullable=False),
        pa.field("call_index", i64, nullable=False),
        pa.field("role", s),
        pa.field("meta_json", s, nullable=False),
        pa.field("prompt_token_ids", pa.list_(i64)),
        pa.field("response_token_ids", pa.list_(i64)),
        pa.field("response_token_strings", pa.list_(s)),
        pa.field("rollout_logprobs", pa.list_(ft)),
        pa.field("rollout_token_policy_versions", pa.list_(i64)),
        pa.field("trainer_logprobs", pa.list_(ft)),
        pa.field("trainer_loss_mask", pa.list_(pa.int8())),
    ]
    for side in ("rollout", "trainer"):
        fields += [
            pa.field(f"{side}_topk_ids", pa.list_(pa.list_(i64))),
            pa.field(f"{side}_topk_logprobs", pa.list_(pa.list_(ft))),
        ]
    # MoE routes, each a call's [tokens, layers, top_k] flattened row-major; layers and top_k in the last two
    fields += [
        pa.field("rollout_routed_experts", pa.list_(pa.int16())),
        pa.field("trainer_routed_experts", pa.list_(pa.int16())),
        pa.field("rollout_router_topk_probs", pa.list_(pa.float32())),
        pa.field("trainer_routes_delta", pa.list_(pa.int16())),  # the trainer's routes, as a difference
        pa.field("routes_layers", pa.int16()),
        pa.field("routes_top_k", pa.int16()),
    ]
    return pa.schema(fields, metadata={b"fcr.format": FORMAT.encode(), b"fcr.record_schema": b"fcr/1"})


def to_numpy(x, name: str, dtype=None):
    """A torch tensor (any device, any float dtype), numpy array or nested list → numpy; None stays None."""
    if x is None:
        return None
    if hasattr(x, "detach"):  # torch, without importing it
        x = x.detach()
        if getattr(x, "dtype", None) is not None and "bfloat16" in str(x.dtype):
            x = x.float()
        x = x.cpu().numpy()
    try:
        arr = np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not an array ({exc})") from None
    return arr


def ids_sha256(ids) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode("ascii")).hexdigest()


@dataclass
class RecordMeta:
    """What every record of a run carries besides its arrays (the fcr/1 fields the trainer knows)."""

    run_id: str
    model: str = "policy"
    tokenizer_id: str = "unknown"
    tokenizer_sha256: str = "unknown"
    engine: str = "unknown"
    logprobs_mode: str | None = None
    extra: dict = field(default_factory=dict)


def _spans(mask_row: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous runs of 1 in a 0/1 row → [(start, end)]."""
    m = np.concatenate([[0], mask_row.astype(np.int8), [0]])
    d = np.diff(m)
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def _check(name, arr, shape, ndim):
    if arr is None:
        return
    if arr.ndim != ndim or tuple(arr.shape[:2]) != tuple(shape):
        raise ValueError(f"{name}: expected shape {list(shape) + (['K'] if ndim == 3 else [])}, got {list(arr.shape)}")


def step_table(
    meta: RecordMeta,
    step: int,
    *,
    rollout_logprobs,
    trainer_logprobs,
    response_mask,
    response_ids,
    prompt_ids=None,
    prompt_mask=None,
    rollout_topk_ids=None,
    rollout_topk_logprobs=None,
    trainer_topk_ids=None,
    trainer_topk_logprobs=None,
    trajectory_ids=None,
    policy_version=None,
    float_type: str = "float32",
    call_prefix: str = "",
    row_offset: int = 0,
    rollout_routed_experts=None,
    trainer_routed_experts=None,
    routing_replay: str | None = None,
    num_experts: int | None = None,
) -> pa.Table:
    """One training step's batch → an ``fcr-parquet/1`` table (one row per policy call). Shapes: ``[B, T]`` for
    log-probs, mask and response ids; ``[B, P]`` prompt ids (``prompt_mask`` marks real tokens, e.g. verl's left
    padding); ``[B, T, K]`` top-K ids/log-probs; ``[B, T, layers, top_k]`` MoE routes (the experts chosen at the
    position that produced each response token; −1 = not recorded), with the trainer's declared ``routing_replay``
    (none / R2 / R3) and the model's ``num_experts``. Refuses mismatched shapes and non-finite log-probs under the
    mask. Without ``trajectory_ids`` a row's id is ``{call_prefix}s{step}-b{row_offset + r}``: (run, step, sample
    index), so the same sample of the same step logged again gets the same id."""
    a, b, mask, y = _batch(rollout_logprobs, trainer_logprobs, response_mask, response_ids)
    B, T = a.shape
    tops = _top_k(B, T, rollout_topk_ids, rollout_topk_logprobs, trainer_topk_ids, trainer_topk_logprobs)
    _check_under_mask(a, b, mask, y)
    routes = _routes(B, T, rollout_routed_experts, trainer_routed_experts)
    if routing_replay not in (None, "none", "R2", "R3"):
        raise ValueError(f"routing_replay: expected none, R2, R3 or None, got {routing_replay!r}")
    p, pm = _prompts(B, prompt_ids, prompt_mask)

    cols: dict[str, list] = {k: [] for k in (*ROW_COLUMNS, *PER_TOKEN_COLUMNS)}
    topk_rows = {side: ([], []) for side in tops}
    route_rows = {side: [] for side in routes}
    model = {
        "served_name": meta.model,
        "policy_version": policy_version,
        **({"num_experts": int(num_experts)} if num_experts is not None else {}),
    }
    for r in range(B):
        prompt = [] if p is None else (p[r][pm[r].astype(bool)] if pm is not None else p[r]).tolist()
        traj = str(trajectory_ids[r]) if trajectory_ids is not None else f"{call_prefix}s{step}-b{row_offset + r}"
        for k, (s, e) in enumerate(_spans(mask[r])):
            resp = y[r, s:e].tolist()
            ctx = prompt + y[r, :s].tolist()
            cid = f"{traj}-c{k}"
            record_meta = _record_meta(meta, model, traj, k, ctx, resp, policy_version, routing_replay)
            row = {
                "run_id": meta.run_id,
                "trajectory_id": traj,
                "call_id": cid,
                "step": int(step),
                "call_index": k,
                "role": "policy",
                "meta_json": json.dumps(record_meta, separators=(",", ":")),
                "prompt_token_ids": ctx,
                "response_token_ids": resp,
                "rollout_logprobs": a[r, s:e],
                "trainer_logprobs": b[r, s:e],
                "trainer_loss_mask": np.ones(e - s, np.int8),
            }
            for name, value in row.items():
                cols[name].append(value)
            for side, (ids, lps) in tops.items():
                topk_rows[side][0].append(ids[r, s:e])
                topk_rows[side][1].append(lps[r, s:e])
            for side, arr in routes.items():
                route_rows[side].append(arr[r, s:e])
    return _table(float_type, cols, topk_rows, routes, route_rows)


# the columns step_table fills row by row: one value per call, then one array per call (one value per token)
ROW_COLUMNS = (
    "run_id",
    "trajectory_id",
    "call_id",
    "step",
    "call_index",
    "role",
    "meta_json",
    "prompt_token_ids",
    "response_token_ids",
)
PER_TOKEN_COLUMNS = ("rollout_logprobs", "trainer_logprobs", "trainer_loss_mask")


def _batch(rollout_logprobs, trainer_logprobs, response_mask, response_ids):
    """The batch's two log-prob arrays, response mask (all ones when not given) and response ids, each [B, T]."""
    a = to_numpy(rollout_logprobs, "rollout_logprobs", np.float64)
    b = to_numpy(trainer_logprobs, "trainer_logprobs", np.float64)
    if a is None or b is None or a.ndim != 2:
        raise ValueError(
            f"rollout_logprobs and trainer_logprobs: expected [B, T] arrays, got "
            f"{None if a is None else list(a.shape)} and {None if b is None else list(b.shape)}"
        )
    B, T = a.shape
    mask = to_numpy(response_mask, "response_mask")
    if mask is None:
        mask = np.ones((B, T), np.int8)
    mask = mask.astype(bool)
    y = to_numpy(response_ids, "response_ids")
    if y is None:
        raise ValueError("response_ids: required (the sampled token ids, [B, T])")
    y = y.astype(np.int64)
    _check("trainer_logprobs", b, (B, T), 2)
    _check("response_mask", mask, (B, T), 2)
    _check("response_ids", y, (B, T), 2)
    return a, b, mask, y


def _top_k(B, T, rollout_ids, rollout_lps, trainer_ids, trainer_lps) -> dict:
    """side -> (top-K ids, top-K log-probs), each [B, T, K], for the sides that gave both."""
    tops = {}
    for side, ids, lps in (("rollout", rollout_ids, rollout_lps), ("trainer", trainer_ids, trainer_lps)):
        if (ids is None) != (lps is None):
            raise ValueError(f"{side}_topk_ids and {side}_topk_logprobs: give both or neither")
        if ids is None:
            continue
        ids, lps = (
            to_numpy(ids, f"{side}_topk_ids").astype(np.int64),
            to_numpy(lps, f"{side}_topk_logprobs", np.float64),
        )
        _check(f"{side}_topk_ids", ids, (B, T), 3)
        _check(f"{side}_topk_logprobs", lps, (B, T), 3)
        if ids.shape != lps.shape:
            raise ValueError(
                f"{side}_topk_ids {list(ids.shape)} and {side}_topk_logprobs {list(lps.shape)} differ in shape"
            )
        tops[side] = (ids, lps)
    return tops


def _check_under_mask(a, b, mask, y) -> None:
    """Under the response mask: finite log-probs and non-negative token ids."""
    for name, arr in (("rollout_logprobs", a), ("trainer_logprobs", b)):
        bad = mask & ~np.isfinite(arr)
        if bad.any():
            r, t = (int(v[0]) for v in np.nonzero(bad))
            raise ValueError(f"{name}[{r}, {t}] is {arr[r, t]} under the response mask (not a log-probability)")
    if (y[mask] < 0).any():
        r, t = (int(v[0]) for v in np.nonzero(mask & (y < 0)))
        raise ValueError(f"response_ids[{r}, {t}] is {y[r, t]} under the response mask (ids are >= 0)")


def _routes(B, T, rollout_routed_experts, trainer_routed_experts) -> dict:
    """side -> MoE routes [B, T, layers, top_k] with "not recorded" as −1, for the sides that gave them."""
    routes = {}
    for side, value in (("rollout", rollout_routed_experts), ("trainer", trainer_routed_experts)):
        arr = to_numpy(value, f"{side}_routed_experts")
        if arr is None:
            continue
        if arr.ndim != 4 or arr.shape[:2] != (B, T) or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"{side}_routed_experts: expected integer [B, T, layers, top_k] = [{B}, {T}, …], got "
                f"{arr.dtype} {list(arr.shape)}"
            )
        if arr.max(initial=-1) > 32767:
            raise ValueError(f"{side}_routed_experts: expert id {int(arr.max())} above 32767 (stored as int16)")
        routes[side] = np.where(arr < 0, -1, arr)  # "not recorded" as −1: int16 would wrap −40000 into an expert id
    if len(routes) == 2 and routes["rollout"].shape != routes["trainer"].shape:
        raise ValueError(
            f"trainer_routed_experts {list(routes['trainer'].shape)} and rollout_routed_experts "
            f"{list(routes['rollout'].shape)} differ in shape"
        )
    return routes


def _prompts(B, prompt_ids, prompt_mask):
    """The prompt ids [B, P] (or None) and their mask (or None: every id is real)."""
    p = to_numpy(prompt_ids, "prompt_ids")
    pm = to_numpy(prompt_mask, "prompt_mask")
    if p is not None:
        p = p.astype(np.int64)
        if p.ndim != 2 or p.shape[0] != B:
            raise ValueError(f"prompt_ids: expected [B, P] with B = {B}, got {list(p.shape)}")
        if pm is not None and pm.shape != p.shape:
            raise ValueError(f"prompt_mask: expected {list(p.shape)}, got {list(pm.shape)}")
    return p, pm


def _record_meta(meta: RecordMeta, model: dict, traj: str, k: int, ctx, resp, policy_version, routing_replay) -> dict:
    """One call's ``meta_json``: where its ids came from, and their digests."""
    return {
        "schema": "fcr/1",
        "role_source": "config",
        "parent_call_id": f"{traj}-c{k - 1}" if k else None,
        "model": model,
        "tokenizer": {"id": meta.tokenizer_id, "sha256": meta.tokenizer_sha256},
        "chat_template": None,
        "engine": {
            "name": meta.engine,
            "api": "generate",
            "logprobs_mode": meta.logprobs_mode,
            "generation_config_source": "unknown",
        },
        "sampling": {},
        "source": {"kind": "audit-portal-client", **meta.extra},
        "prompt": {"provenance": "engine_input", "ids_sha256": ids_sha256(ctx)},
        "response": {"provenance": "engine", "ids_sha256": ids_sha256(resp)},
        "rollout": {},
        "trainer": {
            "policy_version": policy_version,
            "sample_id": f"{traj}-c{k}",
            **({"routing_replay": routing_replay} if routing_replay else {}),
        },
    }


def _table(float_type: str, cols: dict, topk_rows: dict, routes: dict, route_rows: dict) -> pa.Table:
    """The collected rows as an ``fcr-parquet/1`` table; columns nobody gave are null."""
    schema = arrow_schema(float_type)
    ft = schema.field("rollout_logprobs").type.value_type
    arrays = {k: pa.array(cols[k], schema.field(k).type) for k in ROW_COLUMNS}
    for k, vt in (("rollout_logprobs", ft), ("trainer_logprobs", ft), ("trainer_loss_mask", pa.int8())):
        arrays[k] = _flat_list(cols[k], vt)
    for side, (ids_rows, lps_rows) in topk_rows.items():
        arrays[f"{side}_topk_ids"] = _nested(ids_rows, pa.int64())
        arrays[f"{side}_topk_logprobs"] = _nested(lps_rows, ft)
    n = len(cols["run_id"])
    if routes:
        shape = next(iter(routes.values())).shape
        if len(route_rows) == 2:  # the trainer's routes as their difference from the rollout's (route_delta below)
            route_rows["trainer_delta"] = [
                route_delta(r, t) for r, t in zip(route_rows["rollout"], route_rows.pop("trainer"))
            ]
        for side, rows in route_rows.items():
            name = "trainer_routes_delta" if side == "trainer_delta" else f"{side}_routed_experts"
            arrays[name] = _flat_list([x.reshape(-1) for x in rows], pa.int16())
        arrays["routes_layers"] = pa.array([shape[2]] * n, pa.int16())
        arrays["routes_top_k"] = pa.array([shape[3]] * n, pa.int16())
    return pa.Table.from_arrays(
        [arrays[f.name] if f.name in arrays else pa.nulls(n, f.type) for f in schema], schema=schema
    )


ROUTES_SAME = -32768  # in trainer_routes_delta: "the rollout's id" (never an expert id, never −1)


def route_delta(rollout: np.ndarray, trainer: np.ndarray) -> np.ndarray:
    """The trainer's routes as the portal stores them (workers/fcr/route_delta.py, the same encoding; tested against
    its decoder): ROUTES_SAME where the trainer's id equals the rollout's, else the trainer's id (negative: −1, "not
    recorded"). Mostly one value, so the column costs almost nothing when the trainer replays or agrees."""
    return np.where(trainer == rollout, ROUTES_SAME, np.where(trainer < 0, -1, trainer)).astype(np.int16)


def _offsets(rows) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(x) for x in rows])]).astype(np.int32)


def _flat_list(rows: list[np.ndarray], vt) -> pa.Array:
    values = np.concatenate(rows) if rows else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(_offsets(rows)), pa.array(values.astype(vt.to_pandas_dtype())))


def _nested(rows: list[np.ndarray], vt) -> pa.Array:
    """[n_t, K] blocks per row → list<list<vt>> (K entries per position)."""
    K = rows[0].shape[1] if rows else 0
    positions = np.concatenate(rows) if rows else np.zeros((0, K))
    inner_offsets = (np.arange(positions.shape[0] + 1) * K).astype(np.int32)
    values = pa.array(positions.reshape(-1).astype(vt.to_pandas_dtype()))
    inner = pa.ListArray.from_arrays(pa.array(inner_offsets), values)
    return pa.ListArray.from_arrays(pa.array(_offsets(rows)), inner)


def pad_rows(rows, fill=0, dtype=None):
    """Per-sample lists (slime ``Sample.rollout_log_probs``, SkyRL ``GeneratorOutput.response_ids``, …) →
    ``(array [B, T], mask [B, T])``, right-padded with ``fill``: the shapes :meth:`Run.log_step` takes."""
    rows = [to_numpy(r, "row") for r in rows]
    T = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), T), fill, dtype=dtype or (rows[0].dtype if rows else np.float64))
    mask = np.zeros((len(rows), T), np.int8)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        mask[i, : len(r)] = 1
    return out, mask
