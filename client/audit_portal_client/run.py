"""``Client(url, api_key).run(project, name)``: log training steps, upload in the background, get the certificate.

Identity. A run is its ``name`` in its project (the ``run_id`` of its records): given, or made up and printed with
the run's URL. ``Run(...)`` starts it on the portal at once (``POST /projects/<slug>/runs/``), so a bad key, URL or
project fails there, with the portal's message, before the first step; an unreachable portal gives offline mode
(said once: everything is spooled and uploaded when the portal is back, or later with ``audit-portal sync SPOOL``).
Starting a run that exists continues it (``resume=``): the steps the portal or the spool already hold are not logged
again, so a job that restarts from a checkpoint counts each step once, from any process. A record's call id is
(run, rank, step, sample index), so the same sample of the same step always has the same id.

Nothing here blocks the training loop or raises into it: :meth:`Run.log_step` converts the step's tensors to a
table held in memory; a segment — whole steps only, ``segment_steps`` of them, however many micro-batches log each
step — is written in one go to a temporary file, fsynced and renamed into place, and a background thread uploads it
with its step range, retrying with capped exponential backoff while the portal is down or overloaded. A disk or
network error becomes a warning and a *gap*: the steps it lost are counted and reported with the run
(``missing_steps``). A segment that cannot be read is moved to ``quarantine/``, never uploaded. The portal merges
each segment into the run's live view; :meth:`Run.finish` uploads what is left, waits for the merge and returns the
run's certificate — the live view itself, so the two always agree and nothing is sent twice.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import re
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit_portal_client.outcomes import BudgetExceeded, FinishResult, PortalError, PortalUnavailable, ReplayFailed
from audit_portal_client.fcr import RecordMeta, arrow_schema, step_table


log = logging.getLogger("audit_portal_client")

SEGMENT = re.compile(r"^seg-(\d{6})\.parquet$")
AUTH_STATUS = {401, 403, 404}  # the key, the role or the project: the spool is fine, the credentials are not


class _Spool:
    """The run's folder: ``seg-NNNNNN.parquet`` waiting, ``quarantine/`` unreadable, ``rejected/`` refused as a file
    (400/413/415/422), and ``state.json``: project, name, segment → {upload id, steps}, refusals, gaps."""

    def __init__(self, root: Path):
        self.root = root
        for d in ("rejected", "quarantine"):
            (root / d).mkdir(parents=True, exist_ok=True)
        for tmp in root.glob(".seg-*.tmp"):  # a segment a killed process was writing: never complete
            tmp.unlink(missing_ok=True)
        self.state_path = root / "state.json"
        self.lock = threading.Lock()
        state = {}
        if self.state_path.exists():
            try:
                state = json.loads(self.state_path.read_text())
            except (OSError, ValueError):  # a torn state file: segments on disk are the truth
                state = {}
        self.state = {"uploads": {}, "rejected": {}, "quarantined": {}, "missing_steps": [], **state}
        self.journal_path = root / "uploads.jsonl"  # one line per accepted segment: O(1) a segment, not O(run)
        if self.journal_path.exists():
            for line in self.journal_path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                    self.state["uploads"][rec["segment"]] = {"id": rec["id"], "steps": rec["steps"]}
                except (ValueError, KeyError, TypeError):  # a torn last line: that segment is still on disk
                    continue

    def save(self):
        """state.json, atomically (tmp + fsync + rename); a full disk leaves the previous one (logged, not raised).
        Accepted segments are in the journal (:meth:`record_upload`), not here."""
        tmp = self.state_path.with_suffix(".tmp")
        state = {k: v for k, v in self.state.items() if k != "uploads"}
        try:
            _write_atomic(tmp, self.state_path, json.dumps(state, separators=(",", ":")).encode())
        except OSError as exc:
            log.warning("audit-portal: cannot save %s: %s", self.state_path, exc)

    def record_upload(self, segment: str, upload_id: int, steps: list[int]):
        """Append an accepted segment to the journal (flushed and fsynced before the segment file is removed)."""
        line = json.dumps({"segment": segment, "id": upload_id, "steps": steps}, separators=(",", ":")) + "\n"
        with open(self.journal_path, "a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.state["uploads"][segment] = {"id": upload_id, "steps": steps}

    def pending(self) -> list[Path]:
        return sorted(p for p in self.root.iterdir() if SEGMENT.match(p.name))

    def next_index(self) -> int:
        names = [p.name for d in (self.root, self.root / "rejected", self.root / "quarantine") for p in d.iterdir()]
        with self.lock:  # the uploader adds to it
            names += list(self.state["uploads"])
        nums = [int(m.group(1)) for n in names if (m := SEGMENT.match(n))]
        return max(nums, default=0) + 1


def _write_atomic(tmp: Path, final: Path, data: bytes | None = None, table: pa.Table | None = None):
    """Write ``data`` (or ``table`` as Parquet, one row group) to ``tmp``, fsync, rename to ``final``, fsync the
    folder. On any error the temporary file is removed and the error raised; ``final`` is untouched."""
    try:
        if table is not None:
            with open(tmp, "wb") as fh:
                pq.write_table(table, fh, compression="zstd", row_group_size=max(1, table.num_rows))
                fh.flush()
                os.fsync(fh.fileno())
        else:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise
    try:
        fd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _segment_steps(path: Path) -> list[int]:
    """The steps of a segment file (raises when it cannot be read: a corrupt segment)."""
    steps = pq.read_table(path, columns=["step"]).column("step")
    return sorted(set(pc.unique(steps).to_pylist()))


class Run:
    """One training run's log (see the module docstring). Thread-safe against its own uploader; call ``log_step``
    from one training thread. A context manager: ``with client.run(...) as run:`` finishes the run, or marks it
    failed when the block raises."""

    def __init__(
        self,
        client,  # the audit_portal_client.Client that made this run (Client.run), which imports this module
        project: str | None = None,
        name: str | None = None,
        *,
        resume: bool | None = None,
        config: dict | None = None,
        tags: list[str] | None = None,
        rank: int | None = None,
        spool_dir=None,
        segment_steps: int = 8,
        float_type: str = "float32",
        live: bool = True,
        model: str = "policy",
        tokenizer_id: str = "unknown",
        tokenizer_sha256: str = "unknown",
        engine: str = "unknown",
        logprobs_mode: str | None = None,
        max_backoff: float = 30.0,
        strict: bool = False,
    ):
        project = project or os.environ.get("AUDIT_PORTAL_PROJECT")
        if not project:
            raise ValueError("project: give it, or set AUDIT_PORTAL_PROJECT")
        if name is None:
            if resume:
                raise ValueError("resume: name the run to resume")
            name = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.client, self.project, self.name = client, project, name
        self.rank = int(os.environ.get("RANK", 0)) if rank is None else int(rank)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{project}/{name}".replace("/", "__")) + (
            f"-r{self.rank}" if self.rank else ""
        )  # one spool per process: ranks on one machine never share one
        root = (
            Path(spool_dir)
            if spool_dir is not None
            else Path(os.environ.get("AUDIT_PORTAL_SPOOL", Path.home() / ".cache" / "audit-portal" / "spool")) / safe
        )
        self.spool = _Spool(root)
        if self.spool.state.get("rank", self.rank) != self.rank:  # two processes in one spool would mix segments
            raise ValueError(
                f"spool {root} holds rank {self.spool.state['rank']}'s segments, not rank {self.rank}'s: "
                f"give each process (rank) its own spool_dir"
            )
        self.meta = RecordMeta(
            run_id=name,
            model=model,
            tokenizer_id=tokenizer_id,
            tokenizer_sha256=tokenizer_sha256,
            engine=engine,
            logprobs_mode=logprobs_mode,
        )
        self.float_type, self.segment_steps, self.live, self.max_backoff = float_type, segment_steps, live, max_backoff
        self.strict = strict
        self.config, self.tags = config, tags
        self.schema = arrow_schema(float_type)
        self._tables: list[pa.Table] = []  # the open segment: whole steps, written at once when it closes
        self._seg_steps: list[int] = []
        self._step_rows: dict[int, int] = {}  # rows logged per step in this process (the sample index)
        self.steps_logged = 0
        self.steps_skipped = 0  # steps the run already held (resume): not logged again
        self.gaps: set[int] = set(self.spool.state.get("missing_steps") or [])
        self._warned: set[str] = set()
        self.last_error: str | None = None  # the uploader's latest failure (for status / logs)
        self.fatal_error: PortalError | None = None  # a refusal of the key/project: uploads stop until fixed
        self.offline = False
        self._run_id: int | None = None
        self.url: str | None = None
        self._finished = False
        with self.spool.lock:
            self.spool.state.update(project=project, name=name, url=client.url, rank=self.rank)
            self.spool.save()
        self._held = self._spool_steps()
        self._start(resume)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = None
        if live:
            self._thread = threading.Thread(target=self._upload_loop, name=f"audit-portal-uploader-{name}", daemon=True)
            self._thread.start()

    # ---- identity -------------------------------------------------------------------------------------------------
    def _start(self, resume):
        """Start or resume the run on the portal: refusals (key, URL, project) raise now; unreachable: offline."""
        body = {
            "name": self.name,
            **({"config": self.config} if self.config is not None else {}),
            **({"tags": list(self.tags)} if self.tags is not None else {}),
        }
        try:
            run = self.client._request("POST", f"/projects/{self.project}/runs/", json=body)
        except PortalUnavailable as exc:
            self.offline = True
            self._warn_once(
                "offline",
                f"audit-portal: {self.client.url} is not reachable ({exc}); offline: steps are "
                f"spooled in {self.spool.root} and uploaded when it is back (or run "
                f"`audit-portal sync {self.spool.root}`)",
            )
            return
        if not isinstance(run, dict) or not isinstance(run.get("id"), int):
            raise PortalError(
                f"{self.client.url} answered POST /api/v1/projects/{self.project}/runs/ without a run: "
                f"not an Audit Portal (check the URL)"
            )
        self._set_run(run["id"])
        held = self._portal_steps()
        if resume is False and held:
            raise PortalError(
                f"run {self.name!r} of {self.project} exists with {len(held)} step(s): pass "
                f"resume=True to continue it, or another name",
                409,
            )
        if resume is None and held:
            self._warn_once(
                "exists",
                f"audit-portal: run {self.name!r} of {self.project} exists with {len(held)} "
                f"step(s) (up to {max(held)}): continuing it, those steps are not logged again "
                f"(resume=True says so; resume=False or another name starts afresh)",
            )
        self._held |= held
        if self._held:
            log.info(
                "audit-portal: resuming %s: %d step(s) held, up to step %d", self.name, len(self._held), max(self._held)
            )
        log.info("audit-portal: run %s: %s", self.name, self.url)
        print(f"audit-portal: run {self.name}: {self.url}", file=sys.stderr)

    def _set_run(self, run_id: int):
        self._run_id = run_id
        self.url = f"{self.client.url}/p/{self.project}/runs/{run_id}/"
        with self.spool.lock:
            self.spool.state["run"] = run_id
            self.spool.save()

    def _portal_steps(self) -> set[int]:
        """The steps the portal holds from this process (rank): other ranks' sequences of a step are not ours."""
        view = self._run_get("live/") or {}
        if "ranks" not in view:  # a portal before ranks: one process per run
            return set(view.get("series", {}).get("step") or [])
        ranges = next((r.get("ranges") or [] for r in view["ranks"] if r.get("rank") == self.rank), [])
        return {s for first, last in ranges for s in range(first, last + 1)}

    def _spool_steps(self) -> set[int]:
        steps = set()
        for info in self.spool.state["uploads"].values():
            if isinstance(info, dict):
                steps.update(info.get("steps") or [])
        for seg in self.spool.pending():
            try:
                steps.update(_segment_steps(seg))
            except Exception:  # noqa: BLE001 - unreadable: the uploader quarantines it
                pass
        return steps

    # ---- logging --------------------------------------------------------------------------------------------------
    def log_step(
        self,
        step: int,
        *,
        rollout_logprobs,
        trainer_logprobs,
        response_mask=None,
        response_ids=None,
        prompt_ids=None,
        prompt_mask=None,
        rollout_topk_ids=None,
        rollout_topk_logprobs=None,
        trainer_topk_ids=None,
        trainer_topk_logprobs=None,
        trajectory_ids=None,
        policy_version=None,
        rollout_routed_experts=None,
        trainer_routed_experts=None,
        routing_replay=None,
        num_experts=None,
    ) -> int:
        """Log one step's batch, or one micro-batch of it (call again with the same ``step``; torch tensors or numpy
        arrays, ``[B, T]`` / ``[B, T, K]``, padded with ``response_mask``; MoE routes ``[B, T, layers, top_k]`` with
        the declared ``routing_replay`` none/R2/R3). Returns the number of policy calls written (0 for a step the
        run already holds). Never touches the network, never raises (``strict=True``: bad input raises): a failure
        is a warning and a gap in the run."""
        step = int(step)
        if step in self._held:
            self.steps_skipped += step not in self._step_rows
            self._step_rows.setdefault(step, 0)
            return 0
        try:
            table = step_table(
                self.meta,
                step,
                rollout_logprobs=rollout_logprobs,
                trainer_logprobs=trainer_logprobs,
                response_mask=response_mask,
                response_ids=response_ids,
                prompt_ids=prompt_ids,
                prompt_mask=prompt_mask,
                rollout_topk_ids=rollout_topk_ids,
                rollout_topk_logprobs=rollout_topk_logprobs,
                trainer_topk_ids=trainer_topk_ids,
                trainer_topk_logprobs=trainer_topk_logprobs,
                trajectory_ids=trajectory_ids,
                policy_version=step if policy_version is None else policy_version,
                float_type=self.float_type,
                call_prefix=f"{self.name}-" + (f"r{self.rank}-" if self.rank else ""),
                row_offset=self._step_rows.get(step, 0),
                rollout_routed_experts=rollout_routed_experts,
                trainer_routed_experts=trainer_routed_experts,
                routing_replay=routing_replay,
                num_experts=num_experts,
            )
        except Exception as exc:  # training never dies for auditing
            if self.strict:
                raise
            self._gap([step], f"audit-portal: step {step} not logged: {exc.__class__.__name__}: {exc}", "input")
            return 0
        rows = _batch_rows(rollout_logprobs)
        if step not in self._seg_steps and len(self._seg_steps) >= self.segment_steps:
            self._close_segment()  # a new step begins: the segment so far holds whole steps only
        self._step_rows[step] = self._step_rows.get(step, 0) + rows
        if table.num_rows == 0:
            return 0
        if step not in self._seg_steps:
            self._seg_steps.append(step)
            self.steps_logged += 1
        self._tables.append(table)
        return table.num_rows

    def flush(self):
        """Close the open segment now (call it between steps, e.g. when a checkpoint is saved): its steps go to
        the uploader instead of waiting for ``segment_steps`` more."""
        self._close_segment()

    def _gap(self, steps, message: str, kind: str):
        """``steps`` are missing from the run; the first message of each ``kind`` is a warning, later ones debug."""
        self.gaps.update(int(s) for s in steps)
        self._warn_once(kind, message)
        with self.spool.lock:
            self.spool.state["missing_steps"] = sorted(self.gaps)
            self.spool.save()

    def _warn_once(self, key: str, message: str):
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)
        else:
            log.debug(message)

    def _close_segment(self):
        """Write the open segment (whole steps) atomically; a disk error drops its steps into the run's gaps."""
        if not self._tables:
            self._seg_steps = []
            return
        tables, steps = self._tables, self._seg_steps
        self._tables, self._seg_steps = [], []
        name = f"seg-{self.spool.next_index():06d}.parquet"
        try:
            _write_atomic(self.spool.root / f".{name}.tmp", self.spool.root / name, table=pa.concat_tables(tables))
        except Exception as exc:  # a disk error (or any surprise) costs these steps, never training
            if self.strict and not isinstance(exc, OSError):
                raise
            what = "disk full" if getattr(exc, "errno", None) == errno.ENOSPC else exc.__class__.__name__
            self._gap(
                steps,
                f"audit-portal: steps {min(steps)}–{max(steps)} not spooled ({what}: {exc}); the run "
                f"records them as missing, training goes on",
                f"disk:{what}",
            )
            return
        self._held.update(steps)
        if self.gaps & set(steps):  # a step lost earlier (disk, an earlier process) is logged now
            self.gaps -= set(steps)
            with self.spool.lock:
                self.spool.state["missing_steps"] = sorted(self.gaps)
                self.spool.save()
        if self.live:
            self._wake.set()

    # ---- background upload ----------------------------------------------------------------------------------------
    def _ensure_started(self) -> bool:
        """Offline at start: start the run on the portal now (False while it is still unreachable)."""
        if self._run_id is not None:
            return True
        try:
            run = self.client._request(
                "POST",
                f"/projects/{self.project}/runs/",
                json={
                    "name": self.name,
                    **({"config": self.config} if self.config is not None else {}),
                    **({"tags": list(self.tags)} if self.tags is not None else {}),
                },
            )
        except PortalUnavailable as exc:
            self.last_error = str(exc)
            return False
        except PortalError as exc:
            self._refused(exc)
            return False
        self._set_run(run["id"])
        self.offline = False
        log.info("audit-portal: %s is back: run %s: %s", self.client.url, self.name, self.url)
        return True

    def _refused(self, exc: PortalError):
        self.fatal_error = exc
        self._warn_once(
            "refused",
            f"audit-portal: the portal refused the run ({exc}); uploads stop, nothing in "
            f"{self.spool.root} is lost: fix the key/project and run "
            f"`audit-portal sync {self.spool.root}`",
        )

    def _upload_one(self, seg: Path) -> bool:
        """True when the segment is done with (accepted, refused as a file, or quarantined); False to retry later."""
        try:
            steps = _segment_steps(seg)
        except Exception as exc:  # noqa: BLE001 - a corrupt segment: keep it aside, never upload it
            with self.spool.lock:
                self.spool.state["quarantined"][seg.name] = f"{exc.__class__.__name__}: {exc}"[:500]
                self.spool.save()
            os.replace(seg, self.spool.root / "quarantine" / seg.name)
            self._warn_once(
                "quarantine",
                f"audit-portal: segment {seg.name} cannot be read ({exc}); moved to "
                f"{self.spool.root / 'quarantine'}, its steps are missing from the run",
            )
            return True
        if not self._ensure_started():
            return False
        try:
            up = self.client.upload(
                self.project, seg, steps=(steps[0], steps[-1]), **({"rank": self.rank} if self.rank else {})
            )  # rank 0: the portal's default
        except PortalUnavailable as exc:
            self.last_error = str(exc)
            return False
        except PortalError as exc:
            if exc.status in AUTH_STATUS or exc.status is None:
                self._refused(exc)
                return False
            with self.spool.lock:
                self.spool.state["rejected"][seg.name] = str(exc)
                self.spool.save()
            os.replace(seg, self.spool.root / "rejected" / seg.name)
            self._gap(
                steps,
                f"audit-portal: the portal refused segment {seg.name} (steps {steps[0]}–{steps[-1]}): {exc}",
                "rejected",
            )
            return True
        try:
            with self.spool.lock:
                self.spool.record_upload(seg.name, up["id"], steps)
        except OSError as exc:  # cannot record it: keep the file (a re-send is the same bytes: the same upload)
            self.spool.state["uploads"][seg.name] = {"id": up["id"], "steps": steps}
            self.last_error = f"cannot record upload of {seg.name}: {exc}"
            return False
        seg.unlink()  # confirmed stored by the portal: the spool keeps only the record
        self.last_error = None
        log.debug(
            "audit-portal: %s (steps %d–%d) uploaded as upload %s; %d segment(s) waiting",
            seg.name,
            steps[0],
            steps[-1],
            up["id"],
            len(self.spool.pending()),
        )
        return True

    def _drain(self, deadline: float | None = None) -> bool:
        """Upload every waiting segment, retrying with backoff; True when none is left, False at the deadline (or,
        in the background thread, when asked to stop) or when the portal refused the key or project."""
        delay = 0.5
        while True:
            if self.fatal_error is not None:
                return False
            pending = self.spool.pending()
            if not pending:
                return True
            if self._upload_one(pending[0]):
                delay = 0.5
                continue
            if self.fatal_error is not None:
                return False
            pause = delay * random.uniform(0.8, 1.2)
            if deadline is None:  # the background thread: a stop request ends the wait (finish takes over)
                if self._stop.wait(pause):
                    return False
            elif time.monotonic() + pause > deadline:
                return False
            else:
                time.sleep(pause)
            delay = min(delay * 2, self.max_backoff)

    def _upload_loop(self):
        while not self._stop.is_set():
            try:
                self._drain()
            except Exception as exc:  # noqa: BLE001 - the uploader must outlive any surprise; finish() retries
                self.last_error = f"uploader: {exc.__class__.__name__}: {exc}"
            self._wake.wait(5.0)
            self._wake.clear()

    # ---- the run so far, while it trains ---------------------------------------------------------------------------
    def run_id(self) -> int | None:
        """The portal's id of this run (None while it could not be started: offline)."""
        return self._run_id

    def _run_get(self, suffix: str) -> dict | None:
        try:
            run = self.run_id()
            return None if run is None else self.client.get(f"/runs/{run}/{suffix}")
        except PortalUnavailable:  # a training loop may ask every step: the portal being away is not its problem
            return None
        except PortalError as exc:
            if exc.status == 404:  # no live view yet (no segment merged)
                return None
            raise

    def alerts(self) -> dict | None:
        """The project's alert rules for this run now (``GET /runs/<id>/alerts/``: ``firing`` is true when any rule
        fires), or None while the portal has no run for it or cannot be reached. E.g. stop early::

            if (a := run.alerts()) and a["firing"]: break
        """
        return self._run_get("alerts/")

    def live_view(self) -> dict | None:
        """The run so far as the portal merged it (``GET /runs/<id>/live/``: steps, ε̂, B*, budgets, per-step
        series), or None before the first segment is merged or while the portal cannot be reached."""
        return self._run_get("live/")

    def status(self) -> dict:
        return {
            "spool": str(self.spool.root),
            "run": self._run_id,
            "url": self.url,
            "offline": self.offline,
            "steps_logged": self.steps_logged,
            "steps_skipped": self.steps_skipped,
            "waiting": [p.name for p in self.spool.pending()],
            "uploads": {k: (v["id"] if isinstance(v, dict) else v) for k, v in self.spool.state["uploads"].items()},
            "rejected": dict(self.spool.state["rejected"]),
            "quarantined": dict(self.spool.state["quarantined"]),
            "missing_steps": sorted(self.gaps),
            "last_error": self.last_error,
            "refused": None if self.fatal_error is None else str(self.fatal_error),
        }

    # ---- finish ---------------------------------------------------------------------------------------------------
    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finish()
        else:
            self.fail()
        return False

    def fail(self, timeout: float = 30.0):
        """The training failed: upload what was logged (briefly) and mark the run failed on the portal. Never
        raises; what could not be uploaded stays in the spool for ``audit-portal sync``."""
        try:
            self._stop_uploader()
            if self._drain(time.monotonic() + timeout) and self._run_id is not None:
                self.client._request(
                    "POST", f"/runs/{self._run_id}/state/", json={"state": "failed", "missing_steps": sorted(self.gaps)}
                )
        except Exception as exc:  # noqa: BLE001 - auditing never stops training: any failure is a warning
            log.warning("audit-portal: could not mark run %s failed: %s", self.name, exc)
        self._finished = True

    def _stop_uploader(self):
        self._close_segment()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def finish(
        self,
        *,
        budget: float | None = None,
        timeout: float = 900.0,
        wait: bool = True,
        on_job=None,
        require_replay: bool = False,
    ) -> FinishResult | None:
        """Close the log, upload what is left, wait until the portal merged every segment of the run and return
        the run's certificate (its live view: ``certificate`` holds sequences, tokens, ε̂, B* as ``best_bound``,
        ``steps`` and the ``missing_steps`` the client could not log; ``url`` is the run page). ``wait=False``
        returns None after the uploads.

        Raises :class:`PortalUnavailable` when the portal stays unreachable for ``timeout`` seconds (the spool keeps
        everything: call ``finish`` again, or ``audit-portal sync SPOOL``), :class:`PortalError` when the portal
        refuses the key or project (the spool keeps everything too), and :class:`BudgetExceeded` when ``budget`` is
        given and B* is above it. ``require_replay``: also wait for each segment's routing audit and raise
        :class:`ReplayFailed` unless every verdict is PASS (every R3 call trained on exactly the rollout's routes).
        """
        self._stop_uploader()
        deadline = time.monotonic() + timeout
        if not self._drain(deadline):
            if self.fatal_error is not None:
                raise PortalError(
                    f"{self.fatal_error} (nothing is lost: {len(self.spool.pending())} segment(s) wait "
                    f"in {self.spool.root}; `audit-portal sync {self.spool.root}` with the right key)",
                    self.fatal_error.status,
                    self.fatal_error.payload,
                )
            raise PortalUnavailable(
                f"portal unreachable for {timeout:.0f} s ({self.last_error}); "
                f"{len(self.spool.pending())} segment(s) wait in {self.spool.root}",
                self.spool.root,
            )
        if not self._ensure_started():
            raise PortalError(str(self.fatal_error or self.last_error))
        ids = [v["id"] if isinstance(v, dict) else v for v in self.spool.state["uploads"].values()]
        if not ids and not self._portal_steps():
            raise PortalError("nothing was logged: no step had a response token under the mask")
        if not wait:
            return None
        log.info(
            "audit-portal: run %s: %d segment(s) uploaded; waiting for the portal to merge them", self.name, len(ids)
        )
        view = self._wait_merged(ids, deadline, on_job)
        self.client._poll(
            lambda: self.client._request(
                "POST", f"/runs/{self._run_id}/state/", json={"state": "finished", "missing_steps": sorted(self.gaps)}
            ),
            deadline,
        )
        self._finished = True
        self._clean()
        log.info(
            "audit-portal: run %s finished: %s steps, B* %s%s; %s",
            self.name,
            view.get("steps"),
            view.get("best_bound"),
            f", missing steps {sorted(self.gaps)}" if self.gaps else "",
            self.url,
        )
        summary = dict(view.get("summary") or {})
        cert = {
            **summary,
            "best_bound": view.get("best_bound"),
            "best_bound_id": view.get("best_bound_id"),
            "steps": view.get("steps"),
            "first_step": view.get("first_step"),
            "last_step": view.get("last_step"),
            "missing_steps": sorted(self.gaps),
            "series": view.get("series"),
            "skipped": view.get("skipped"),
            "verdict": view.get("verdict"),  # the merged view's: the run's verdict on its page and in the table
        }
        result = FinishResult(None, self._run_id, None, self.url, cert)
        if budget is not None and (result.best_bound is None or result.best_bound > budget):
            raise BudgetExceeded(result, budget)
        if require_replay:
            for upload_id in ids:
                report = self.client.wait_for_routing(upload_id, timeout=max(1.0, deadline - time.monotonic()))
                if (report.get("replay") or {}).get("state") != "PASS":
                    raise ReplayFailed(upload_id, report.get("replay") or {})
        return result

    def _wait_merged(self, ids: list[int], deadline: float, on_job=None) -> dict:
        """Poll the live view until each uploaded segment is merged, left out (the portal says why) or invalid."""
        waiting, delay = set(ids), 0.25
        while True:
            view = self.client._poll(lambda: self._run_get("live/"), deadline) or {}
            waiting -= set(view.get("merged_uploads") or []) | set(view.get("skipped_uploads") or [])
            if waiting:  # an invalid segment never reaches the live view
                for upload_id in sorted(waiting)[:4]:
                    up = self.client._poll(lambda: self.client.get(f"/uploads/{upload_id}/"), deadline)
                    if up.get("stage") == "invalid":
                        waiting.discard(upload_id)
                        log.warning(
                            "audit-portal: segment upload %s is invalid: %s",
                            upload_id,
                            (up.get("validation") or {}).get("errors", [])[:1],
                        )
            if on_job is not None:
                on_job(
                    {
                        "kind": "live_merge",
                        "state": "running" if waiting else "succeeded",
                        "progress": 1 - len(waiting) / max(1, len(ids)),
                    }
                )
            if not waiting and view:
                return view
            if time.monotonic() > deadline:
                raise PortalUnavailable(
                    f"run {self.name}: {len(waiting)} segment(s) not merged in the live view in time", self.spool.root
                )
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _clean(self):
        """After a confirmed finish: the segment files are gone already; drop the empty folders (state.json stays,
        so a later resume knows the run's steps)."""
        for d in ("rejected", "quarantine"):
            path = self.spool.root / d
            try:
                if path.is_dir() and not any(path.iterdir()):
                    shutil.rmtree(path)
            except OSError:
                pass


def _batch_rows(x) -> int:
    shape = getattr(x, "shape", None)
    if shape is not None and len(shape) >= 1:
        return int(shape[0])
    try:
        return len(x)
    except TypeError:
        return 0


def sync(client, spool_dir, *, project: str | None = None, timeout: float = 900.0) -> FinishResult:
    """Upload what a spool holds (a run that ended offline, or whose key was refused) and finish the run."""
    root = Path(spool_dir)
    state = json.loads((root / "state.json").read_text()) if (root / "state.json").exists() else {}
    project = project or state.get("project")
    name = state.get("name")
    if not project or not name:
        raise ValueError(f"{root}: no state.json naming the project and run (not a spool?)")
    run = Run(client, project, name, resume=True, rank=state.get("rank"), spool_dir=root, live=False)
    return run.finish(timeout=timeout)
