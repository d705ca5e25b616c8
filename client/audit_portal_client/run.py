"""``Client(url, api_key).run(project, name)``: log training steps, upload in the background, get the certificate.

Nothing here blocks the training loop on the network: :meth:`Run.log_step` converts the step's tensors to one Parquet
row group in the run's current *segment* file in an on-disk spool; a closed segment is renamed into place (atomic)
and a background thread uploads it, retrying with capped exponential backoff for as long as the portal is down or
overloaded (connection errors, 5xx, 408, 429). Nothing is deleted before the portal has accepted it, and a new
:class:`Run` on the same spool directory picks up what an earlier process left (a crash loses at most the open
segment's steps). Each segment is sent with its step range, so the portal merges it into the run's live view while
training goes on (certificate, mismatch metrics and alerts over the steps so far). :meth:`Run.finish` closes the
last segment, waits for the uploads, uploads the whole run as one file, waits for its certificate and returns it —
and, given a ``budget``, raises :class:`BudgetExceeded` when the certified best bound B* is above it.
"""
from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit_portal_client.client import (BudgetExceeded, Client, FinishResult, PortalError, PortalUnavailable,
                                        ReplayFailed)
from audit_portal_client.fcr import RecordMeta, arrow_schema, step_table

SEGMENT = re.compile(r"^seg-(\d{6})\.parquet$")


class _Spool:
    """The run's folder: ``seg-NNNNNN.parquet`` waiting, ``uploaded/`` accepted, ``rejected/`` refused (4xx), and
    ``state.json`` (segment → upload id, refusals with their reason)."""

    def __init__(self, root: Path):
        self.root = root
        for d in ("uploaded", "rejected"):
            (root / d).mkdir(parents=True, exist_ok=True)
        self.state_path = root / "state.json"
        self.lock = threading.Lock()
        self.state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {"uploads": {},
                                                                                               "rejected": {}}

    def save(self):
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        os.replace(tmp, self.state_path)

    def pending(self) -> list[Path]:
        return sorted(p for p in self.root.iterdir() if SEGMENT.match(p.name))

    def next_index(self) -> int:
        names = [p.name for d in (self.root, self.root / "uploaded", self.root / "rejected") for p in d.iterdir()]
        nums = [int(m.group(1)) for n in names if (m := SEGMENT.match(n.replace(".part", "")))]
        return max(nums, default=0) + 1

    def all_segments(self) -> list[Path]:
        return sorted((p for d in (self.root / "uploaded", self.root) for p in d.iterdir() if SEGMENT.match(p.name)),
                      key=lambda p: p.name)


class Run:
    """One training run's log (see the module docstring). Thread-safe against its own uploader; call from one
    training thread."""

    def __init__(self, client: Client, project: str, name: str, *, spool_dir=None, segment_steps: int = 8,
                 float_type: str = "float32", live: bool = True, model: str = "policy",
                 tokenizer_id: str = "unknown", tokenizer_sha256: str = "unknown", engine: str = "unknown",
                 logprobs_mode: str | None = None, max_backoff: float = 30.0):
        self.client, self.project, self.name = client, project, name
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{project}/{name}".replace("/", "__"))
        root = Path(spool_dir) if spool_dir is not None else Path(
            os.environ.get("AUDIT_PORTAL_SPOOL", Path.home() / ".cache" / "audit-portal" / "spool")) / safe
        self.spool = _Spool(root)
        self.meta = RecordMeta(run_id=name, model=model, tokenizer_id=tokenizer_id,
                               tokenizer_sha256=tokenizer_sha256, engine=engine, logprobs_mode=logprobs_mode)
        self.float_type, self.segment_steps, self.live, self.max_backoff = float_type, segment_steps, live, max_backoff
        self.schema = arrow_schema(float_type)
        self._writer = None
        self._seg_path: Path | None = None
        self._seg_steps = 0
        self.steps_logged = 0
        self.last_error: str | None = None  # the uploader's latest retryable failure (for status / logs)
        self._run_id: int | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = None
        if live:
            self._thread = threading.Thread(target=self._upload_loop, name=f"audit-portal-uploader-{name}",
                                            daemon=True)
            self._thread.start()

    # ---- logging --------------------------------------------------------------------------------------------------
    def log_step(self, step: int, *, rollout_logprobs, trainer_logprobs, response_mask=None, response_ids=None,
                 prompt_ids=None, prompt_mask=None, rollout_topk_ids=None, rollout_topk_logprobs=None,
                 trainer_topk_ids=None, trainer_topk_logprobs=None, trajectory_ids=None, policy_version=None,
                 rollout_routed_experts=None, trainer_routed_experts=None, routing_replay=None,
                 num_experts=None) -> int:
        """Log one step's batch (torch tensors or numpy arrays, ``[B, T]`` / ``[B, T, K]``, padded with
        ``response_mask``; MoE routes ``[B, T, layers, top_k]`` with the declared ``routing_replay`` none/R2/R3).
        Returns the number of policy calls written. Never touches the network."""
        table = step_table(self.meta, step, rollout_logprobs=rollout_logprobs, trainer_logprobs=trainer_logprobs,
                           response_mask=response_mask, response_ids=response_ids, prompt_ids=prompt_ids,
                           prompt_mask=prompt_mask, rollout_topk_ids=rollout_topk_ids,
                           rollout_topk_logprobs=rollout_topk_logprobs, trainer_topk_ids=trainer_topk_ids,
                           trainer_topk_logprobs=trainer_topk_logprobs, trajectory_ids=trajectory_ids,
                           policy_version=step if policy_version is None else policy_version,
                           float_type=self.float_type, call_prefix=f"{self.name}-{self.steps_logged}-",
                           rollout_routed_experts=rollout_routed_experts,
                           trainer_routed_experts=trainer_routed_experts, routing_replay=routing_replay,
                           num_experts=num_experts)
        if table.num_rows == 0:
            return 0
        if self._writer is None:
            idx = self.spool.next_index()
            self._seg_path = self.spool.root / f"seg-{idx:06d}.parquet.part"
            self._writer = pq.ParquetWriter(self._seg_path, self.schema, compression="zstd")
        self._writer.write_table(table)
        self._seg_steps += 1
        self.steps_logged += 1
        if self._seg_steps >= self.segment_steps:
            self._close_segment()
        return table.num_rows

    def _close_segment(self):
        if self._writer is None:
            return
        self._writer.close()
        os.replace(self._seg_path, self._seg_path.with_suffix(""))  # drop ".part": complete, ready to upload
        self._writer, self._seg_path, self._seg_steps = None, None, 0
        self._wake.set()

    # ---- background upload ----------------------------------------------------------------------------------------
    def _upload_one(self, seg: Path) -> bool:
        """True when the segment is done with (accepted or refused for good); False to retry later."""
        steps = pq.read_table(seg, columns=["step"]).column("step")  # the segment's steps, for the live view
        try:
            up = self.client.upload(self.project, seg, steps=(pc.min(steps).as_py(), pc.max(steps).as_py()))
        except PortalUnavailable as exc:
            self.last_error = str(exc)
            return False
        except PortalError as exc:
            with self.spool.lock:
                self.spool.state["rejected"][seg.name] = str(exc)
                self.spool.save()
            os.replace(seg, self.spool.root / "rejected" / seg.name)
            return True
        with self.spool.lock:
            self.spool.state["uploads"][seg.name] = up["id"]
            self.spool.save()
        os.replace(seg, self.spool.root / "uploaded" / seg.name)
        self.last_error = None
        return True

    def _drain(self, deadline: float | None = None) -> bool:
        """Upload every waiting segment, retrying with backoff; True when none is left, False at the deadline."""
        delay = 0.5
        while True:
            pending = self.spool.pending()
            if not pending:
                return True
            if self._upload_one(pending[0]):
                delay = 0.5
                continue
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
        """The portal's id of this run, known once a segment is validated (None before; one GET per uploaded
        segment until then)."""
        if self._run_id is None:
            for upload_id in list(self.spool.state["uploads"].values()):
                run = self.client.get(f"/uploads/{upload_id}/").get("run")
                if run:
                    self._run_id = run
                    break
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
        return {"spool": str(self.spool.root), "steps_logged": self.steps_logged,
                "waiting": [p.name for p in self.spool.pending()], "uploads": dict(self.spool.state["uploads"]),
                "rejected": dict(self.spool.state["rejected"]), "last_error": self.last_error}

    # ---- finish ---------------------------------------------------------------------------------------------------
    def finish(self, *, budget: float | None = None, timeout: float = 900.0, wait: bool = True,
               on_job=None, require_replay: bool = False) -> FinishResult | None:
        """Close the log, upload what is left and the whole run as one file, and wait for its certificate.

        Returns a :class:`FinishResult` (``url`` is the run page); ``wait=False`` returns None after the uploads.
        Raises :class:`PortalUnavailable` when the portal stays unreachable for ``timeout`` seconds (the spool keeps
        everything: call ``finish`` again, or ``audit-portal upload`` the file it names), :class:`PortalError` when
        the portal refuses the run, and :class:`BudgetExceeded` when ``budget`` is given and B* is above it.
        ``require_replay``: also wait for the routing audit and raise :class:`ReplayFailed` unless its replay verdict
        is PASS (every R3 call trained on exactly the rollout's routes).
        """
        self._close_segment()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        deadline = time.monotonic() + timeout
        if self.live and not self._drain(deadline):
            raise PortalUnavailable(f"portal unreachable for {timeout:.0f} s ({self.last_error}); "
                                    f"{len(self.spool.pending())} segment(s) wait in {self.spool.root}",
                                    self.spool.root)
        if self.spool.state["rejected"]:
            name, why = next(iter(self.spool.state["rejected"].items()))
            raise PortalError(f"the portal refused segment {name}: {why}")
        final = self._merge()
        if final is None:
            raise PortalError("nothing was logged: no step had a response token under the mask")
        up = self.client._poll(lambda: self.client.upload(self.project, final), deadline)
        with self.spool.lock:
            self.spool.state["final"] = up["id"]
            self.spool.save()
        if not wait:
            return None
        result = self.client.wait_for_certificate(up["id"], timeout=max(1.0, deadline - time.monotonic()),
                                                  on_job=on_job)
        if budget is not None and (result.best_bound is None or result.best_bound > budget):
            raise BudgetExceeded(result, budget)
        if require_replay:
            report = self.client.wait_for_routing(result.upload_id, timeout=max(1.0, deadline - time.monotonic()))
            if (report.get("replay") or {}).get("state") != "PASS":
                raise ReplayFailed(result.upload_id, report.get("replay") or {})
        return result

    def _merge(self) -> Path | None:
        """Every segment of the run, in order, as one file (row groups copied, not re-encoded per value)."""
        segments = self.spool.all_segments()
        if not segments:
            return None
        out = self.spool.root / "run.parquet"
        tmp = out.with_suffix(".parquet.part")
        with pq.ParquetWriter(tmp, self.schema, compression="zstd") as w:
            for seg in segments:
                pf = pq.ParquetFile(seg)
                for g in range(pf.num_row_groups):
                    w.write_table(pf.read_row_group(g))
        os.replace(tmp, out)
        return out
