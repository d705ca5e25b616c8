"""Attach the trainer side to an imported inference log: ``python -m workers.fidelity join INFERENCE TRAINER OUT``.

Imported inference logs (vLLM, SGLang, Agent Lightning, …) never carry what only the trainer knows: the recomputed
log-probs, the loss mask it applied, the merged sample id, the declared task hash. Without them every policy call is
``TRAINER_LOGPROB_MISSING``. The trainer writes one row per call it trained on (JSONL, optionally gzip, or Parquet
with the same column names) — the *trainer side* (``fcr-trainer/1``):

=============================== =========================================================================
``call_id``                     the inference record's ``call_id`` (``#i`` suffix for choice i of ``n > 1``), or
``trajectory_id`` + ``call_index`` the inference record's trajectory and index (must name exactly one record)
``logprobs``                    recomputed sampled-token log-probs, aligned with ``response.token_ids``
``top_k`` *opt*                 ``[[id, lp], …]`` per position (or ``top_k_ids`` + ``top_k_logprobs``, ``[T][K]``)
``loss_mask_used`` *opt*        0/1 per position, the mask actually applied (alias ``response_mask``)
``sample_id`` *opt*             merged-sequence id (calls packed into one sample share it)
``policy_version`` *opt*        weights version of the recompute
``routed_experts`` *opt*        MoE experts the trainer used, ``[T][layers][top_k]`` (docs/routing.md)
``routing_replay`` *opt*        the trainer's replay mode: ``none`` / ``R2`` / ``R3``
``task_prompt_sha256_declared`` *opt* SHA-256 of the trajectory's task text (root call), set at dispatch
``response_token_ids`` *opt*    the ids the trainer trained on; must equal the inference record's ids
``role`` *opt*                  ``policy`` / ``background``: the trainer's own declaration (``role_source: config``)
``step`` *opt*                  trainer step; fills a record whose importer did not know it (step −1)
=============================== =========================================================================

A row may also be a whole ``fcr/1`` record (its ``trainer`` block and keys are used), and the trainer side may be an
``fcr-parquet/1`` run log (docs/run-log-parquet.md; what the training-loop client library writes), read record by
record through :mod:`workers.fcr.columnar`. Rules, each failure naming the
trainer row (file:line) and the inference record (line, call id): a key given twice in the trainer side, a row that
names no inference record, a row that names more than one (``trajectory_id``/``call_index`` shared by ``n > 1``
choices), an inference record claimed by two rows, ids that differ, a step that conflicts, and a joined record the
``fcr/1`` validator rejects (misaligned or mistyped arrays; the field is named) all refuse the join; nothing is
written then. A *policy* inference record with no trainer row is refused too unless ``allow_untrained`` (then it
stays without a ``trainer`` block and the audit excludes it). Memory: the trainer rows wait in a temporary SQLite file,
so the join holds one record at a time plus O(1) per trainer row in SQLite's page cache.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile

import orjson

from workers.fcr.source import RunLogSource
from workers.fcr.validate import validate_record
from workers.fidelity.importers.common import dump, read_jsonl, ref_of

TRAINER_FIELDS = (
    "logprobs",
    "top_k",
    "loss_mask_used",
    "sample_id",
    "policy_version",
    "routed_experts",
    "routing_replay",
)
MAX_ERRORS = 20


class JoinError(ValueError):
    """The join was refused; ``problems`` lists each reason (the record named)."""

    def __init__(self, problems: list[str], total: int):
        self.problems, self.total = problems, total
        more = f" (and {total - len(problems)} more)" if total > len(problems) else ""
        super().__init__(f"join refused: {total} problem(s){more}:\n  " + "\n  ".join(problems))


def iter_rows(path):
    """``(line_or_row_number, dict or None, error or None)`` for a JSONL (plain/gzip) or Parquet trainer side, read
    through the one door for run logs (workers/fcr/source.py); Parquet is read one record batch at a time."""
    source = RunLogSource(path)
    if not source.parquet:
        yield from read_jsonl(path)
        return
    if source.is_run_log_parquet():  # an fcr-parquet/1 run log (the client library writes them)
        for row_no, rec in source.rows():
            if isinstance(rec, Exception):
                yield row_no, None, str(rec)
            else:
                yield row_no, rec, None
        return
    n = 0
    for batch in source.table_batches(1024):
        for row in batch:
            n += 1
            yield n, row, None


def _trainer_block(row: dict, where: str) -> tuple[dict, dict]:
    """A trainer row → (the record's ``trainer`` block, the other fields it carries)."""
    if isinstance(row.get("trainer"), dict):  # a whole fcr/1 record
        row = {
            **row["trainer"],
            **{k: v for k, v in row.items() if k != "trainer"},
            "task_prompt_sha256_declared": (row.get("prompt") or {}).get("task_prompt_sha256_declared")
            if isinstance(row.get("prompt"), dict)
            else None,
            "response_token_ids": (row.get("response") or {}).get("token_ids")
            if isinstance(row.get("response"), dict)
            else None,
        }
    block = {k: row[k] for k in TRAINER_FIELDS if row.get(k) is not None}
    if "loss_mask_used" not in block and row.get("response_mask") is not None:
        block["loss_mask_used"] = row["response_mask"]
    ids, lps = row.get("top_k_ids"), row.get("top_k_logprobs")
    if "top_k" not in block and ids is not None:
        if not (
            isinstance(ids, list)
            and isinstance(lps, list)
            and len(ids) == len(lps)
            and all(isinstance(a, list) and isinstance(b, list) and len(a) == len(b) for a, b in zip(ids, lps))
        ):
            raise ValueError(f"{where}: top_k_ids and top_k_logprobs must be lists of equal shape [T][K]")
        block["top_k"] = [[[i, v] for i, v in zip(a, b)] for a, b in zip(ids, lps)]
    if "logprobs" not in block:
        raise ValueError(f"{where}: no logprobs (the recomputed sampled-token log-probs are what the join attaches)")
    extra = {
        k: row.get(k)
        for k in ("task_prompt_sha256_declared", "response_token_ids", "role", "step")
        if row.get(k) is not None
    }
    return block, extra


def _keys(row) -> list[str]:
    keys = []
    if isinstance(row.get("call_id"), str) and row["call_id"]:
        keys.append("id\0" + row["call_id"])
    ti, ci = row.get("trajectory_id"), row.get("call_index")
    if isinstance(ti, str) and ti and type(ci) is int:
        keys.append(f"ti\0{ti}\0{ci}")
    return keys


def join(
    inference_path, trainer_path, out_path, *, allow_untrained: bool = False, max_errors: int = MAX_ERRORS
) -> dict:
    """Join; returns counts ``{records, joined, untrained, trainer_rows, roles_declared}``. Raises :class:`JoinError`
    (nothing written) when any rule above fails."""
    problems: list[str] = []
    total = 0

    def problem(text):
        nonlocal total
        total += 1
        if len(problems) < max_errors:
            problems.append(text)

    tdir = tempfile.mkdtemp(prefix="fcr-join-")
    db_path = os.path.join(tdir, "trainer.sqlite")
    db = sqlite3.connect(db_path)
    tmp_out = f"{out_path}.partial"
    stats = {"records": 0, "joined": 0, "untrained": 0, "trainer_rows": 0, "roles_declared": 0}
    try:
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE TABLE row (id INTEGER PRIMARY KEY, line INTEGER, label TEXT, payload BLOB, used_by TEXT)")
        db.execute("CREATE TABLE key (k TEXT PRIMARY KEY, row INTEGER)")
        _store_trainer_rows(db, trainer_path, stats, problem)
        with open(tmp_out, "wb") as out:
            for line, rec, err in read_jsonl(inference_path):
                stats["records"] += 1
                where = f"inference {ref_of(inference_path, line)}"
                if not isinstance(rec, dict):
                    problem(f"{where}: {err or 'not a JSON object'}")
                    continue
                where += f" (call {rec.get('call_id')})"
                joined = _join_record(db, rec, where, trainer_path, stats, problem, allow_untrained)
                if joined is not None:
                    out.write(dump(joined))
        for tline, label in db.execute("SELECT line, label FROM row WHERE used_by IS NULL ORDER BY line"):
            problem(
                f"trainer {ref_of(trainer_path, tline)}: {label} matches no inference record (trained data "
                f"the inference log does not have)"
            )
        if total:
            raise JoinError(problems, total)
        os.replace(tmp_out, out_path)
    finally:
        db.close()
        for p in (db_path, tmp_out):
            if os.path.exists(p):
                os.unlink(p)
        os.rmdir(tdir)
    return stats


def _store_trainer_rows(db, trainer_path, stats: dict, problem) -> None:
    """Every trainer row into the SQLite file (its trainer block and other fields, and its keys); a row that names
    no record, a key given twice, or a value JSON has no form for is a problem."""
    for line, row, err in iter_rows(trainer_path):
        where = f"trainer {ref_of(trainer_path, line)}"
        if err is not None or not isinstance(row, dict):
            problem(f"{where}: {err or 'not a JSON object'}")
            continue
        stats["trainer_rows"] += 1
        keys = _keys(row)
        if not keys:
            problem(f"{where}: names no inference record (needs call_id, or trajectory_id and call_index)")
            continue
        try:
            block, extra = _trainer_block(row, where)
        except ValueError as exc:
            problem(str(exc))
            continue
        label = row.get("call_id") or f"{row.get('trajectory_id')}#{row.get('call_index')}"
        try:
            payload = orjson.dumps([block, extra])
        except TypeError as exc:  # e.g. a Parquet column of a type JSON has no form for
            problem(f"{where}: a value is not JSON-representable ({exc})")
            continue
        cur = db.execute("INSERT INTO row (line, label, payload) VALUES (?, ?, ?)", (line, str(label), payload))
        for k in keys:
            prior = db.execute("SELECT r.line FROM key JOIN row r ON r.id = key.row WHERE key.k = ?", (k,)).fetchone()
            if prior is not None:
                problem(f"{where}: {_key_text(k)} is also given at line {prior[0]} (ambiguous trainer side)")
            else:
                db.execute("INSERT INTO key (k, row) VALUES (?, ?)", (k, cur.lastrowid))


def _join_record(db, rec: dict, where: str, trainer_path, stats: dict, problem, allow_untrained: bool):
    """What to write for one inference record: the record with its trainer row attached, the record alone (no
    trainer row), or None after naming a problem."""
    hits = {}
    for k in _keys(rec):
        hit = db.execute("SELECT row FROM key WHERE k = ?", (k,)).fetchone()
        if hit is not None:
            hits[hit[0]] = k
    if len(hits) > 1:
        problem(f"{where}: matched by two trainer rows (its call_id and its trajectory/index name different rows)")
        return None
    if not hits:
        if rec.get("role") == "policy" and not allow_untrained:
            problem(
                f"{where}: policy call with no trainer row (pass allow_untrained / "
                f"--allow-untrained to keep it without one)"
            )
        stats["untrained"] += 1
        return rec
    ((row_id, key),) = hits.items()
    tline, used_by, payload = db.execute("SELECT line, used_by, payload FROM row WHERE id = ?", (row_id,)).fetchone()
    twhere = f"trainer {ref_of(trainer_path, tline)}"
    if used_by is not None:
        problem(
            f"{twhere}: {_key_text(key)} matches more than one inference record ({used_by} and {where}); give each "
            f"call_id"
        )
        return None
    db.execute("UPDATE row SET used_by = ? WHERE id = ?", (where, row_id))
    block, extra = orjson.loads(payload)
    joined = _attach(rec, block, extra, where, twhere, problem)
    if joined is None:
        return None
    if "role" in extra:
        stats["roles_declared"] += 1
    stats["joined"] += 1
    return joined


def _key_text(k: str) -> str:
    kind, *rest = k.split("\0")
    return f"call_id {rest[0]!r}" if kind == "id" else f"trajectory {rest[0]!r} call_index {rest[1]}"


def _attach(rec, block, extra, where, twhere, problem):
    """The inference record with the trainer side attached, or None after naming the problem."""
    resp = rec.get("response") if isinstance(rec.get("response"), dict) else {}
    ids = extra.get("response_token_ids")
    if ids is not None and ids != resp.get("token_ids"):
        problem(f"{twhere}: response_token_ids differ from {where}'s response.token_ids (not the same call)")
        return None
    out = dict(rec)
    if isinstance(rec.get("trainer"), dict):
        problem(f"{where}: already has a trainer block (joined twice?)")
        return None
    out["trainer"] = block
    step = extra.get("step")
    if step is not None:
        if type(step) is not int:
            problem(f"{twhere}: step must be an int, got {type(step).__name__}")
            return None
        if rec.get("step") not in (-1, None, step):
            problem(f"{twhere}: step {step} conflicts with {where}'s step {rec.get('step')}")
            return None
        out["step"] = step
    if extra.get("task_prompt_sha256_declared") is not None and isinstance(rec.get("prompt"), dict):
        out["prompt"] = dict(rec["prompt"], task_prompt_sha256_declared=extra["task_prompt_sha256_declared"])
    role = extra.get("role")
    if role is not None:
        if role not in ("policy", "background"):
            problem(f"{twhere}: role must be 'policy' or 'background', got {role!r}")
            return None
        out["role"], out["role_source"] = role, "config"
    bad = [
        i
        for i in validate_record(out, lint=False)
        if i.severity == "error"
        and (i.field.startswith("trainer") or i.field in ("step", "role") or i.field.startswith("prompt.task_prompt"))
    ]
    if bad:
        problem(f"{twhere} → {where}: {bad[0].field}: {bad[0].reason}")
        return None
    return out
