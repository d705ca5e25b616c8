"""``certify_file``: a whole fcr/1 run log (JSONL, plain or gzip) to a JSON-serialisable run certificate.

Streaming: records are parsed one line at a time and certified in chunks of about ``chunk_tokens`` tokens, each
chunk vectorised as flat ``[N, K]`` tensors (one row per token; sequences are segments, so a chunk never pads
short sequences to the longest one). Memory is bounded by one chunk plus O(#steps + max length) accumulators;
per-sequence results go to ``sequence_sink`` chunk by chunk and are not kept.

Which records: policy calls (``role == "policy"``; a record without ``role`` is treated as policy — it has
trainer log-probs, so it was trained on and gets the scrutiny). ``background`` / ``unknown`` calls are counted and
skipped with a reason. A policy call whose data cannot be certified (missing trainer log-probs, misaligned
arrays, null or sentinel log-probs, positive log-probs, unsorted or duplicate top-K ids, …) is a DATA_ERROR
sequence with its line number, call_id and reason; no single bad record raises.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict

import numpy as np
import orjson
import torch

from workers.certify.intervals import describe_errors, tv_interval_topk
from workers.certify.robust import DATA_ERROR as T_DE, IN as T_IN, OUT as T_OUT, UNDETERMINED as T_UND
from workers.certify.robust import UNIT_ROUNDOFF
from workers.certify.partial import TOKEN_STATUS, Partial
from workers.certify.records import RecordError, arrays_of, record_meta, uncovered_positions
from workers.certify.summary import summarise
from workers.certify.sequence import DATA_ERROR, DEFAULT_THRESHOLDS, MODES, SEQ_STATUS_NAMES, decide, length_bucket
from workers.certify import parquet_rows
from workers.certify.bounds import CONSTANTS, guard_threshold
from workers.fcr.gc_pause import GcPaused
from workers.fcr.reader import FcrParseError
from workers.fcr.source import RunLogSource
from workers.fcr.validate import array_bools_possible
from workers.jsonsafe import finite_or_none


# ---- streaming ---------------------------------------------------------------------------------------------------
def _lines(source, state):
    """Yield ``(line_no, bytes)`` of a JSONL source through its bounded reader (workers/fcr/source.py: line length and
    decompression limits); a truncated or corrupt gzip stream or a limit is recorded in ``state['stream_error']``
    (line, reason) instead of raising, after every complete line before it."""
    raw = source.lines()
    try:
        state["raw"] = raw.raw
        try:
            for line_no, line in raw:
                if line.strip():
                    yield line_no, line
        except FcrParseError as exc:
            state["stream_error"] = (exc.line, exc.reason)
    finally:
        raw.close()


def _source(path, state, chunk=None):
    """``(line or row number, raw line | record, arrays | None)``: JSONL lines, or the rows of an fcr-parquet/1 file
    (workers/certify/parquet_rows.py: a clean row arrives as arrays, read from its columns); ``chunk`` (a
    workers.fcr.chunks.Chunk or its dict) restricts them to one piece: a byte range or a range of row groups. Both
    read through the one door, :class:`workers.fcr.source.RunLogSource`."""
    source = RunLogSource(path, chunk)
    if source.parquet:
        yield from parquet_rows.rows(source, state)
    else:
        for line_no, line in _lines(source, state):
            yield line_no, line, None


def _error_seq(run, meta, reason, length=None):
    run.sequences += 1
    run.seq_counts["DATA_ERROR"] += 1
    run.error(meta["line"], meta["call_id"], reason)
    st = run.step(meta["step"])
    st["sequences"] += 1
    st["status"]["DATA_ERROR"] += 1
    return {
        **meta,
        "length": length,
        "status": "DATA_ERROR",
        "accept": False,
        "eps_hat": None,
        "delta_hat": None,
        "tv_lo_max": None,
        "mean_k3": None,
        "max_k2": None,
        "A_y": None,
        "reason": reason,
    }


def _process_chunk(run, items, opts):
    """Certify one chunk of good records: items = [(meta, y, a, b, p_top, q_top)]. Returns per-sequence dicts."""
    lens = np.array([len(it[1]) for it in items], dtype=np.int64)
    N = int(lens.sum())
    Kp = max((it[4][0].shape[1] for it in items if it[4] is not None), default=0)
    Kq = max((it[5][0].shape[1] for it in items if it[5] is not None), default=0)
    y = np.empty(N, np.int64)
    a = np.empty(N)
    b = np.empty(N)
    p_ids = np.full((N, Kp), -1, np.int64)
    p_lp = np.zeros((N, Kp))
    q_ids = np.full((N, Kq), -1, np.int64)
    q_lp = np.zeros((N, Kq))
    off = 0
    for meta, yy, aa, bb, pt, qt in items:
        n = len(yy)
        y[off : off + n], a[off : off + n], b[off : off + n] = yy, aa, bb
        if pt is not None:
            k = pt[0].shape[1]
            p_ids[off : off + n, :k], p_lp[off : off + n, :k] = pt
        if qt is not None:
            k = qt[0].shape[1]
            q_ids[off : off + n, :k], q_lp[off : off + n, :k] = qt
        off += n
    run.has_topk_p |= Kp > 0
    run.has_topk_q |= Kq > 0
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    # fcr/1 (docs/fcr.md#rollout-and-trainer): rollout.top_k is the engine's own top-K (descending) — caps apply if
    # requested;
    # trainer.top_k is the trainer's values on ids that must cover the rollout's (it may add more), not the trainer's
    # own top-K, so it is an arbitrary subset: no trainer cap, no order requirement (caps need a true top-K,
    # docs/intervals.md#top-k-caps).
    r = tv_interval_topk(
        torch.from_numpy(p_ids),
        torch.from_numpy(p_lp),
        torch.from_numpy(q_ids),
        torch.from_numpy(q_lp),
        torch.from_numpy(y),
        ta,
        tb,
        caps=(opts["caps"], False),
        precision=opts["precision"],
        eta=opts["eta"],
    )
    log_r = torch.clamp(tb - ta, -20.0, 20.0)
    k2 = 0.5 * log_r * log_r
    k3 = torch.exp(log_r) - 1.0 - log_r

    # flat token → sequence segments
    B = len(items)
    seg = torch.from_numpy(np.repeat(np.arange(B), lens))
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    pos = torch.from_numpy(np.arange(N) - np.repeat(starts, lens) + 1)  # 1-based position t
    L = torch.from_numpy(lens)

    def seg_max(x):
        return torch.full((B,), -math.inf, dtype=torch.float64).scatter_reduce_(0, seg, x, "amax")

    def seg_sum(x):
        return torch.zeros(B, dtype=torch.float64).index_add_(0, seg, x)

    err_seq = seg_sum((r.err != 0).to(torch.float64)) > 0
    first_err = torch.full((B,), N, dtype=torch.int64).scatter_reduce_(
        0, seg, torch.where(r.err != 0, torch.arange(N), N), "amin"
    )
    eps_hat, tv_lo_max = seg_max(r.hi), seg_max(r.lo)
    delta_hat, kl_lo_max = seg_max(r.kl_hi), seg_max(r.kl_lo)
    nL = L.to(torch.float64)
    kl_seq = seg_sum(r.kl_hi)
    tv_sum = seg_sum(r.hi)
    tv_seq = torch.minimum(tv_sum.clamp(max=1.0), torch.sqrt(kl_seq / 2.0))
    k3_sum = seg_sum(k3)
    mean_k3, max_k2 = k3_sum / nL, seg_max(k2)
    # A(y) with the sequence's own ε̂, δ̂ and length (streaming: run-level values are known only at the end;
    # the run-level mean of A(y) is recomputed exactly from the position profile in the summary).
    rem = (L[seg] - pos).to(torch.float64)
    w = torch.minimum(torch.ones_like(rem), rem * eps_hat[seg])
    w_kl = torch.sqrt(rem * delta_hat[seg] / 2.0)
    w = torch.where(torch.isfinite(w_kl), torch.minimum(w, w_kl), w)
    c = CONSTANTS[opts["constants"]] * opts["reward_range"]
    A_y = c * seg_sum(r.hi * w)

    thr = opts["threshold"]
    mode = opts["mode"]
    avg = opts["avg_threshold"]
    accept, status = decide(
        mode,
        thr,
        eps_hat=eps_hat,
        tv_lo_max=tv_lo_max,
        delta_hat=delta_hat,
        kl_lo_max=kl_lo_max,
        mean_hi=seg_sum(r.hi if mode != "kl" else r.kl_hi) / nL,
        mean_lo=seg_sum(r.lo if mode != "kl" else r.kl_lo) / nL,
        heuristic_stat=max_k2 if mode == "k2max" else mean_k3,
        avg_threshold=avg,
    )
    accept &= ~err_seq
    status[err_seq] = DATA_ERROR

    # token statuses (certified quantity of the mode; TV at the default TV threshold for heuristic modes)
    tthr = opts["token_threshold"]
    tlo, thi = (r.kl_lo, r.kl_hi) if mode == "kl" else (r.lo, r.hi)
    tok = torch.full((N,), T_UND, dtype=torch.int8)
    tok[thi <= tthr] = T_IN
    tok[tlo > tthr] = T_OUT
    tok[r.err != 0] = T_DE
    tc = torch.bincount(tok.to(torch.int64), minlength=4).tolist()
    for i, name in enumerate(TOKEN_STATUS):
        run.tok_counts[name] += tc[i]

    # run-level accumulators over valid sequences
    ok = ~err_seq
    run.tokens += N
    okt = ok[seg]
    if ok.any():
        run.eps_max = max(run.eps_max, float(eps_hat[ok].max()))
        run.delta_max = max(run.delta_max, float(delta_hat[ok].max()))
        run.tv_lo_max = max(run.tv_lo_max, float(tv_lo_max[ok].max()))
        # exact sums of per-sequence terms (workers/certify/exact.py): the same bits however the file is cut
        n_ok = int(ok.sum())
        run.sums.add(np.repeat(np.arange(4), n_ok), torch.cat([eps_hat[ok], kl_seq[ok], tv_seq[ok], k3_sum[ok]]))
        run.sums.add(4, A_y[ok])
        Lmax = int(L[ok].max())
        run.profile.add((pos[okt] - 1).numpy(), r.hi[okt].numpy())
        run.T_ref = max(run.T_ref, Lmax)
    run.metrics.add([it[0]["step"] for it in items], lens, ok.numpy(), a, b)
    run.ok_tokens += int(okt.sum())

    out = []
    acc_l, st_l = accept.tolist(), status.tolist()
    e_l, d_l, lo_l, k3_l, k2_l, A_l = (x.tolist() for x in (eps_hat, delta_hat, tv_lo_max, mean_k3, max_k2, A_y))
    fe_l = first_err.tolist()
    k3_seq = k3_sum.tolist()
    step_terms = defaultdict(list)  # step → per-sequence (ε̂, Σ k3) of its certified sequences, summed exactly below
    for i, (meta, *_rest) in enumerate(items):
        st_name = SEQ_STATUS_NAMES[st_l[i]]
        run.sequences += 1
        run.seq_counts[st_name] += 1
        run.accepted += int(acc_l[i])
        reason = None
        if st_name == "DATA_ERROR":
            j = fe_l[i]
            reason = f"position {j - int(starts[i])}: " + "; ".join(describe_errors(int(r.err[j])))
            run.error(meta["line"], meta["call_id"], reason)
        else:
            run.ok_sequences += 1
        st = run.step(meta["step"])
        st["sequences"] += 1
        st["tokens"] += int(lens[i])
        st["accepted"] += int(acc_l[i])
        st["status"][st_name] += 1
        if st_name != "DATA_ERROR":
            st["eps_max"] = max(st["eps_max"], e_l[i])
            step_terms[meta["step"]] += (e_l[i], k3_seq[i])
            st["eps_n"] += 1
            st["delta_max"] = max(st["delta_max"], d_l[i])
            st["ok_tokens"] += int(lens[i])
        run.bucket(length_bucket(int(lens[i])), acc_l[i])
        bad = st_name == "DATA_ERROR"
        out.append(
            {
                **meta,
                "length": int(lens[i]),
                "status": st_name,
                "accept": bool(acc_l[i]),
                "eps_hat": None if bad else finite_or_none(e_l[i]),
                "delta_hat": None if bad else finite_or_none(d_l[i]),
                "tv_lo_max": None if bad else finite_or_none(lo_l[i]),
                "mean_k3": finite_or_none(k3_l[i]),
                "max_k2": finite_or_none(k2_l[i]),
                "A_y": None if bad else finite_or_none(A_l[i]),
                "reason": reason,
            }
        )
    for step, terms in step_terms.items():
        run.step(step)["sums"].add(np.tile([0, 1], len(terms) // 2), terms)
    return out


def _scan_T_ref(path):
    """Pre-pass for ``budget`` without ``threshold``/``T_ref``: the longest policy response (bounds grow with T)."""
    source = RunLogSource(path)
    if source.parquet:
        return parquet_rows.max_policy_length(source)
    T = 0
    state: dict = {}
    for _, line in _lines(source, state):
        try:
            rec = orjson.loads(line)
            if isinstance(rec, dict) and rec.get("role", "policy") == "policy":
                T = max(T, len(rec["response"]["token_ids"]))
        except Exception:  # noqa: BLE001 - the main pass reports the bad line
            continue
    return T


def certify_file(path, *, chunk_tokens=1 << 16, sequence_sink=None, progress=None, **options) -> dict:
    """Certify a whole fcr/1 run log (docs/certify.md#what-is-certified; see the module docstring for the record rules).

    Options (:func:`plan_certificate`): ``mode`` ∈ {tv, kl, k2max, k3mean} (the last two are verl-equivalent
    heuristics, status HEURISTIC); ``threshold`` (per-token ε or δ) or ``budget`` (error budget E: the threshold is
    the largest one keeping some TRM bound ≤ E at T_ref; without T_ref a pre-pass finds the longest response);
    neither ⇒ DEFAULT_THRESHOLDS. ``precision`` (fp32/bf16/fp16/fp64/exact) or ``eta`` declares the storage error of
    the logged log-probs (docs/intervals.md#error-robust-widening). ``caps`` assumes rollout.top_k is the engine's
    true top-K (the trainer list never gets a cap: fcr/1 only requires it to cover the rollout's ids,
    docs/fcr.md#rollout-and-trainer). Returns a JSON-safe dict
    (inf/NaN → None): ``summary, bounds, bounds_simplified, budget, steps, length_buckets, errors, caveats,
    options``. The same as merging :func:`certify_part` over any cut of the file (workers/certify/partial.py).
    """
    plan = plan_certificate(path, **options)
    result = summarise(
        certify_part(path, plan, chunk_tokens=chunk_tokens, sequence_sink=sequence_sink, progress=progress), plan
    )
    if progress is not None:
        progress(1.0, "done")
    return result


def plan_certificate(
    path,
    *,
    threshold=None,
    budget=None,
    mode="tv",
    precision="fp32",
    eta=None,
    constants="paper",
    reward_range=1.0,
    caps=True,
    avg_threshold=None,
    T_ref=None,
    max_errors=100,
) -> dict:
    """The certify options resolved once for the whole file (JSON-safe; see :func:`certify_file`). A budget without
    ``threshold``/``T_ref`` needs the longest policy response first: the one whole-file pass (``_scan_T_ref``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    precision = "fp32" if precision is None else precision
    if eta is None and precision not in UNIT_ROUNDOFF:
        raise ValueError(f"precision must be one of {sorted(UNIT_ROUNDOFF)}")
    if constants not in CONSTANTS:
        raise ValueError(f"constants must be one of {sorted(CONSTANTS)}")
    threshold_source = "given"
    if threshold is None and budget is not None and mode in ("tv", "kl"):
        T_guard = int(T_ref) if T_ref is not None else _scan_T_ref(path)
        threshold, via = guard_threshold(mode, max(T_guard, 1), budget, constants=constants, reward_range=reward_range)
        threshold_source = f"budget {budget} at T={T_guard} via {via}"
    elif threshold is None:
        threshold = DEFAULT_THRESHOLDS[mode]
        threshold_source = "default"
    opts = {
        "mode": mode,
        "threshold": float(threshold),
        "avg_threshold": avg_threshold,
        "precision": precision,
        "eta": eta,
        "caps": bool(caps),
        "constants": constants,
        "reward_range": float(reward_range),
        "token_threshold": float(threshold) if mode in ("tv", "kl") else DEFAULT_THRESHOLDS["tv"],
    }
    return {
        "opts": opts,
        "budget": budget,
        "threshold_source": threshold_source,
        "T_ref": T_ref,
        "max_errors": int(max_errors),
    }


def certify_part(path, plan: dict, chunk=None, *, chunk_tokens=1 << 16, sequence_sink=None, progress=None) -> Partial:
    """Certify the records of one piece of ``path`` (a :class:`workers.fcr.chunks.Chunk` or its dict; None = the
    whole file) into a :class:`~workers.certify.partial.Partial`; sequence rows go to ``sequence_sink``."""
    opts = plan["opts"]
    run = Partial(plan["max_errors"])
    size = os.path.getsize(path) or 1
    state: dict = {}
    items, pending, n_tok = [], [], 0

    def flush():
        nonlocal items, pending, n_tok
        out = pending
        if items:
            out = sorted(out + _process_chunk(run, items, opts), key=lambda d: d["line"])
        if sequence_sink is not None and out:
            sequence_sink(out)
        if progress is not None:
            raw = state.get("raw")
            frac = min(1.0, raw.tell() / size) if raw is not None and not raw.closed and chunk is None else None
            progress(frac, f"{run.sequences} sequences, {run.tokens} tokens certified")
        items, pending, n_tok = [], [], 0

    with GcPaused() as gc_pause:  # large records would trigger full collections of the whole heap (gc_pause.py)
        for line_no, line, arrays in _source(path, state, chunk):
            gc_pause.tick()
            run.records += 1
            rec, bad = _parsed(run, line_no, line)
            if bad is not None:
                pending.append(bad)
                continue
            role = rec.get("role", "policy")
            if role != "policy":
                run.skipped[f"role {role}"] += 1
                continue
            run.policy += 1
            meta = record_meta(rec, line_no)
            try:
                y, a, b, pt, qt = arrays_of(rec, arrays, type(line) is bytes and not array_bools_possible(line))
            except RecordError as exc:
                pending.append(_error_seq(run, meta, str(exc)))
                continue
            if len(y) == 0:
                run.skipped["empty response"] += 1
                continue
            if pt is not None and qt is not None:
                n_unc = uncovered_positions(pt, qt)
                if n_unc:
                    run.uncovered(meta, n_unc)
            items.append((meta, y, a, b, pt, qt))
            n_tok += len(y)
            if n_tok >= chunk_tokens:
                flush()
        flush()
    if "stream_error" in state:
        ln, reason = state["stream_error"]
        run.records += 1
        out = [_error_seq(run, _no_meta(ln), reason)]
        if sequence_sink is not None:
            sequence_sink(out)
    return run


def _no_meta(line_no: int) -> dict:
    """The sequence fields of a line that is not a record: only where it is."""
    return {"call_id": None, "trajectory_id": None, "step": None, "line": line_no}


def _parsed(run, line_no: int, line) -> tuple[dict | None, dict | None]:
    """``(record, None)`` for a JSONL line holding a JSON object (a Parquet row arrives as its record), else
    ``(None, its DATA_ERROR sequence)``."""
    if type(line) is dict:
        return line, None
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return None, _error_seq(run, _no_meta(line_no), f"not valid JSON ({exc})")
    if not isinstance(rec, dict):
        return None, _error_seq(run, _no_meta(line_no), f"expected a JSON object, got {type(rec).__name__}")
    return rec, None
