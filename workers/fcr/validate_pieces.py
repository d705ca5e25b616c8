"""Validation of an upload in pieces (workers/fcr/chunks.py) that any worker reads, merged into the summary that
:func:`workers.fcr.validate.validate_file` gives for the whole file (docs/fcr.md#validating-in-pieces).

Most of the validator's rules are about one record, so a piece is validated alone (:func:`validate_piece`). Two are
about the whole file, and the merge (:func:`merge_pieces`) finishes them with what each piece kept:

* **Duplicate calls** (a ``(run_id, call_id)`` seen on an earlier line is a warning): each piece keeps the first line
  of every call key it holds (64 bits a call, stable across processes); the merge walks the pieces in file order
  and warns at the first line of a key that an earlier piece already held.
* **One layer count per model** (every routed record of a model has the first such record's number of layers): each
  piece reports the first count of every model it saw. A piece whose first count of a model differs from the one an
  earlier piece established is read once more, starting from the earlier pieces' counts; its records of that model
  are then judged as the one-pass read judges them. A consistent file (the usual case) reads nothing twice.

The rest merges by sums, minima and maxima; errors and warnings keep the first ``max_errors``/``max_warnings`` by
line; run ids keep the first 1000 in file order; a piece whose reading stopped (a read limit, a Parquet row group
that cannot be read) ends the file there, as it ends the one-pass read. So the merged summary equals the one-pass summary, except
``bytes_read`` of a file whose reading stopped (where each read stopped depends on its buffering). Tested:
tests/fcr/test_validate_pieces.py.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

from workers.fcr import run_params
from workers.fcr.source import Chunk, RunLogSource
from workers.fcr.schema import FcrIssue
from workers.fcr.validate import RUNS_CAP, Tally, read_into

PIECE_KEYS = (
    "records",
    "valid_records",
    "routed_records",
    "n_err",
    "n_warn",
    "policy_tokens",
    "response_tokens",
    "dups",
)


def validate_piece(
    path,
    chunk: Chunk | dict,
    *,
    max_errors: int = 20,
    max_warnings: int = 20,
    known_layers: dict | None = None,
    known_params: dict | None = None,
) -> dict:
    """One piece's share of the summary, as JSON (what :func:`merge_pieces` needs). ``known_layers``: ``{model:
    (layers, line, top_k)}`` and ``known_params`` (the runs' first ``run_config`` / ``run_tags``) established by the
    earlier pieces (the merge passes them when it reads a piece again)."""
    source = RunLogSource(path, chunk)
    chunk = source.piece
    known_params = known_params or {}
    tally = Tally(max_errors, max_warnings, piece=True, known_layers=known_layers, known_params=known_params)
    reader = source.reader()
    _, consumed = read_into(tally, reader)
    if chunk.kind == "lines":
        consumed -= chunk.start
    elif chunk.kind == "row_groups" and not tally.stopped:  # a row group that cannot be read ends the reading there
        tally.stopped = consumed < _row_group_bytes(source)
    known = tally.known_layers
    return {
        "index": chunk.index,
        "chunk": chunk.to_dict(),
        **{k: getattr(tally, k) for k in PIECE_KEYS},
        "errors": tally.errors,
        "warnings": tally.warnings,
        "runs": tally.run_order,
        "runs_truncated": tally.runs_truncated,
        "step_min": tally.step_min,
        "step_max": tally.step_max,
        "by_role": tally.by_role,
        "has_trainer_lp": tally.has_trainer_lp,
        "has_topk": tally.has_topk,
        "keys": [[key, line, call_id] for key, (line, call_id) in tally.first_keys.items()],
        "layers": [[model, *shape] for model, shape in tally.layer_counts.seen.items() if model not in known],
        "params": tally.params.new_since(known_params),
        "stopped": tally.stopped,
        "bytes": consumed,
        "compressed": bool(reader.compressed),
        "format": getattr(reader, "format", "fcr/1"),
    }


def merge_pieces(pieces: list[dict], *, path, max_errors: int = 20, max_warnings: int = 20, read_again=None) -> dict:
    """The summary of the whole file from its pieces' (any order; each piece once). ``read_again(index,
    known_layers)`` validates a piece once more (default: :func:`validate_piece` on ``path``); called only for a
    piece whose first layer count of a model, or first run parameters of a run, disagree with an earlier piece's
    (then with a third argument, the earlier pieces' run parameters)."""
    if read_again is None:
        by_index = {p["index"]: p for p in pieces}

        def read_again(index, known, known_params=None):
            return validate_piece(
                path,
                by_index[index]["chunk"],
                max_errors=max_errors,
                max_warnings=max_warnings,
                known_layers=known,
                known_params=known_params,
            )

    kept, known, params = [], {}, {}
    for piece in sorted(pieces, key=lambda p: p["index"]):
        # each entry: [model, layers, line, top_k] (top_k absent in pieces stored before it was recorded)
        if any(m in known and (known[m][0] != n or known[m][2:] != tuple(k)) for m, n, _, *k in piece["layers"]):
            piece = read_again(piece["index"], dict(known), _copy(params))
        elif run_params.disagrees(params, piece.get("params") or {}):
            piece = read_again(piece["index"], dict(known), _copy(params))
        for model, n, line, *k in piece["layers"]:
            known.setdefault(model, (n, line, *k))
        run_params.merge(params, piece.get("params") or {})  # absent in pieces stored before it was recorded
        kept.append(piece)
        if piece["stopped"]:  # the one-pass read ends here too
            break
    return _summary(kept, path, max_errors, max_warnings, params)


def _copy(params: dict) -> dict:
    return {run: dict(fields) for run, fields in params.items()}


def _summary(pieces: list[dict], path, max_errors: int, max_warnings: int, params: dict) -> dict:
    """The pieces' shares added up in a :class:`Tally`, whose summary is the one ``validate_file`` writes."""
    tally = Tally(max_errors, max_warnings, known_params=params)
    for k in PIECE_KEYS:
        setattr(tally, k, sum(p[k] for p in pieces))
    tally.errors = [e for p in pieces for e in p["errors"]][:max_errors]  # each piece's in line order, in file order
    first_line: dict[int, int] = {}
    cross: list[dict] = []  # duplicates of a call an earlier piece held: warned at this piece's first line of it
    for p in pieces:
        for key, line, call_id in p["keys"]:
            if key in first_line:
                cross.append(FcrIssue(line, call_id, "call_id", "duplicate call_id in run", "warning").to_dict())
            else:
                first_line[key] = line
    tally.dups += len(cross)
    tally.n_warn += len(cross)
    warnings = sorted([w for p in pieces for w in p["warnings"]] + cross, key=lambda w: w["line"])  # stable
    tally.warnings = warnings[:max_warnings]
    tally.runs_truncated = any(p["runs_truncated"] for p in pieces)
    for p in pieces:
        for run_id in p["runs"]:
            if run_id not in tally.runs:
                if len(tally.runs) < RUNS_CAP:
                    tally.runs.add(run_id)
                else:
                    tally.runs_truncated = True
    tally.step_min = min((p["step_min"] for p in pieces if p["step_min"] is not None), default=None)
    tally.step_max = max((p["step_max"] for p in pieces if p["step_max"] is not None), default=None)
    tally.by_role = {role: sum(p["by_role"][role] for p in pieces) for role in tally.by_role}
    tally.has_trainer_lp = any(p["has_trainer_lp"] for p in pieces)
    tally.has_topk = any(p["has_topk"] for p in pieces)
    reader = SimpleNamespace(
        compressed=any(p["compressed"] for p in pieces), format=pieces[0]["format"] if pieces else "fcr/1"
    )
    return tally.summary(reader, sum(p["bytes"] for p in pieces), os.path.getsize(path))


def _row_group_bytes(source: RunLogSource) -> int:
    """Compressed bytes of the piece's row groups: what its reader has consumed when it read every one."""
    log = source.run_log()
    try:
        return sum(log.compressed[source.groups.start : source.groups.stop])
    finally:
        log.close()
