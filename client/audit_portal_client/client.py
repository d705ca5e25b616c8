"""``Client(url, api_key)``: the portal's REST API as a training job needs it — upload a run log (streamed from
disk, with its step range), wait for its certificate or its routing audit, and start a :class:`~audit_portal_client.run.Run`
that logs steps as they train. Errors: :class:`PortalError` (the portal refused, with its message),
:class:`PortalUnavailable` (not reachable), :class:`BudgetExceeded` and :class:`ReplayFailed` (the CI gates).
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import requests

from audit_portal_client.outcomes import (  # noqa: F401 - re-exported: audit_portal_client.client names them too
    BudgetExceeded,
    FinishResult,
    PortalError,
    PortalUnavailable,
    ReplayFailed,
)
from audit_portal_client.upload import PARTS_ABOVE

RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}


class Client:
    """A portal endpoint and a project API key (scopes ``read`` and ``submit``): given, or read from
    ``AUDIT_PORTAL_URL``, ``AUDIT_PORTAL_KEY`` (or ``AUDIT_PORTAL_API_KEY``) and ``AUDIT_PORTAL_PROJECT``. Nothing is
    sent until a request; :meth:`run` checks the key, URL and project at once."""

    def __init__(
        self, url: str | None = None, api_key: str | None = None, *, project: str | None = None, timeout: float = 30.0
    ):
        url = url or os.environ.get("AUDIT_PORTAL_URL")
        api_key = api_key or os.environ.get("AUDIT_PORTAL_KEY") or os.environ.get("AUDIT_PORTAL_API_KEY")
        if not url or not api_key:
            raise ValueError("Client: give url and api_key, or set AUDIT_PORTAL_URL and AUDIT_PORTAL_KEY")
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.project = project or os.environ.get("AUDIT_PORTAL_PROJECT")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {api_key}"

    # ---- HTTP ---------------------------------------------------------------------------------------------------
    def _request(self, method: str, path: str, **kw) -> dict:
        """One request; raises :class:`PortalUnavailable` for what a retry may fix, :class:`PortalError` else."""
        try:
            r = self.session.request(method, f"{self.url}/api/v1{path}", timeout=self.timeout, **kw)
        except requests.RequestException as exc:
            raise PortalUnavailable(f"{method} {path}: {exc.__class__.__name__}: {exc}") from exc
        if r.status_code in RETRYABLE_STATUS:
            raise PortalUnavailable(f"{method} {path}: HTTP {r.status_code}: {r.text[:300]}")
        try:
            body = r.json()
        except ValueError:
            body = {}
        if r.status_code >= 400:
            err = body.get("error", {}) if isinstance(body, dict) else {}
            raise PortalError(
                f"{method} {path}: HTTP {r.status_code} {err.get('code', '')}: {err.get('message', r.text[:300])}",
                r.status_code,
                body,
            )
        return body

    def get(self, path: str) -> dict:
        return self._request("GET", path)

    def upload(
        self,
        project: str,
        path,
        progress=None,
        steps: tuple[int, int] | None = None,
        rank: int | None = None,
        *,
        parts_above: int | None = PARTS_ABOVE,
        hash_progress=None,
        state_dir=None,
        config: dict | None = None,
        tags=None,
    ) -> dict:
        """POST one run-log file (JSONL, .jsonl.gz or .parquet) to the project; returns the upload object (201 new,
        200 the same bytes were uploaded before). ``progress(bytes_sent, total)`` while the body streams. ``steps``
        ``(first, last)`` declares the file as those steps of a run that grows while it trains: the portal merges
        them into the run's live view (docs/client.md, "Streaming steps"); ``rank``, the process of a multi-process
        run that wrote them (default 0), lets several processes send the same steps.

        A file larger than ``parts_above`` bytes (64 MiB; None: never) goes as a resumable upload in parts
        (:mod:`audit_portal_client.upload`): calling ``upload`` again after an interruption sends only the parts the
        portal is missing. ``hash_progress(bytes_read, total)`` while its SHA-256 is computed first; ``state_dir``
        holds the remembered sessions (default ``AUDIT_PORTAL_STATE`` or ``~/.cache/audit-portal``). A file with
        ``steps`` always goes in one request (the portal's sessions take no step range).

        ``config`` (a JSON object: at most 64 keys and 16 KiB, values scalars or short lists) and ``tags`` (strings)
        go with the file, either way it is sent: when the portal finds the upload valid, they are merged into its
        run's config and tags (a resumed upload in parts keeps those its session was started with)."""
        path = Path(path)
        size = os.path.getsize(path)
        if steps is None and parts_above is not None and size > parts_above:
            from audit_portal_client import upload as parts

            try:
                return parts.upload_in_parts(
                    self,
                    project,
                    path,
                    progress=progress,
                    hash_progress=hash_progress,
                    state=None if state_dir is None else Path(state_dir) / "uploads",
                    declared=_declared(config, tags),
                )
            except parts.SessionsFull as exc:  # a single request takes any size up to the limit, without resuming
                parts.log.warning("%s; sending %s in one request", exc, path.name)
        fields = {"steps": f"{steps[0]}-{steps[1]}"} if steps is not None else {}
        if steps is not None and rank is not None:
            fields["rank"] = str(int(rank))
        fields.update({k: json.dumps(v) for k, v in _declared(config, tags).items()})  # JSON text: one line
        with open(path, "rb") as fh:
            body = _Multipart(fh, path.name, size, progress, fields)
            return self._request(
                "POST",
                f"/projects/{project}/uploads/",
                data=body,
                headers={"Content-Type": body.content_type, "Content-Length": str(len(body))},
            )

    def wait_for_certificate(
        self, upload_id: int, *, timeout: float = 900.0, poll: float = 1.0, on_job=None
    ) -> FinishResult:
        """Poll an upload until its certificate is complete (or the upload turns invalid: :class:`PortalError`).
        ``on_job(job dict)`` on every poll (for a progress bar)."""
        deadline = time.monotonic() + timeout
        while True:
            up = self._poll(lambda: self.get(f"/uploads/{upload_id}/"), deadline)
            if up["stage"] == "invalid":
                errs = up.get("validation", {}).get("errors", [])[:3]
                raise PortalError(
                    f"upload {upload_id} is invalid: "
                    + "; ".join(f"line {e.get('line')}: {e.get('field') or 'record'}: {e.get('reason')}" for e in errs),
                    422,
                    up,
                )
            if up["stage"] == "duplicate" and up.get("duplicate_of"):
                upload_id = up["duplicate_of"]
                continue
            cert_job = next((j for j in up.get("jobs", []) if j["kind"] == "certify_upload"), None)
            if cert_job is not None:
                job = self._poll(lambda: self.get(f"/jobs/{cert_job['id']}/"), deadline)
                if on_job is not None:
                    on_job(job)
                if job["state"] == "succeeded":
                    cid = (job.get("result") or {}).get("certificate")
                    cert = self._poll(lambda: self.get(f"/certificates/{cid}/"), deadline)
                    run = up.get("run") or cert.get("run")
                    url = f"{self.url}/p/{up['project']}/runs/{run}/?certificate={cid}"
                    return FinishResult(upload_id, run, cid, url, cert)
                if job["state"] in ("failed", "cancelled"):
                    raise PortalError(
                        f"certificate job {job['id']} {job['state']}: {job.get('error') or ''}", None, job
                    )
            elif on_job is not None:
                on_job({"kind": "validate_upload", "state": up["stage"], "progress": None})
            if time.monotonic() > deadline:
                raise PortalUnavailable(f"upload {upload_id}: no certificate after {timeout:.0f} s")
            time.sleep(poll)

    def wait_for_routing(self, upload_id: int, *, timeout: float = 900.0, poll: float = 1.0) -> dict:
        """Poll an upload until its routing audit is done and return the report (the job's result; docs/routing.md).
        An upload without MoE routes gets no routing job: its verdict is returned as ``NOT_DECLARED``."""
        deadline = time.monotonic() + timeout
        while True:
            up = self._poll(lambda: self.get(f"/uploads/{upload_id}/"), deadline)
            if up["stage"] == "duplicate" and up.get("duplicate_of"):
                upload_id = up["duplicate_of"]
                continue
            job = next((j for j in up.get("jobs", []) if j["kind"] == "routing_audit"), None)
            if job is None and up["stage"] in ("valid", "invalid"):  # follow-ups are queued with the verdict
                return {"replay": {"state": "NOT_DECLARED", "reason": "the run log carries no MoE routes"}}
            if job is not None:
                job = self._poll(lambda: self.get(f"/jobs/{job['id']}/"), deadline)
                if job["state"] == "succeeded":
                    return job.get("result") or {}
                if job["state"] in ("failed", "cancelled"):
                    raise PortalError(
                        f"routing audit job {job['id']} {job['state']}: {job.get('error') or ''}", None, job
                    )
            if time.monotonic() > deadline:
                raise PortalUnavailable(f"upload {upload_id}: no routing audit after {timeout:.0f} s")
            time.sleep(poll)

    def _poll(self, fn, deadline):
        """``fn()`` retried while the portal is unavailable, until ``deadline``."""
        delay = 0.5
        while True:
            try:
                return fn()
            except PortalUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def run(self, project: str | None = None, name: str | None = None, **kw):
        """Start logging the run ``name`` of ``project`` (a made-up name when None), or continue it: see
        :class:`~audit_portal_client.run.Run` (``resume=``, ``config=``, ``tags=``, ``segment_steps=``, …). Raises
        :class:`PortalError` at once when the portal refuses the key or the project."""
        from audit_portal_client.run import Run  # run.py builds on this module

        return Run(self, project or self.project, name, **kw)


def _declared(config, tags) -> dict:
    """The ``config``/``tags`` given, as the portal takes them (tags: a list of strings)."""
    out = {}
    if config is not None:
        out["config"] = dict(config)
    if tags is not None:
        out["tags"] = [tags] if isinstance(tags, str) else [str(t) for t in tags]
    return out


class _Multipart:
    """A ``multipart/form-data`` body with one file field, streamed from disk (``read(n)``) with a known length."""

    def __init__(self, fh, filename: str, size: int, progress=None, fields: dict | None = None):
        boundary = f"audit-portal-{random.getrandbits(64):016x}"
        self.content_type = f"multipart/form-data; boundary={boundary}"
        safe = filename.replace('"', "_").replace("\r", "_").replace("\n", "_")
        # plain fields first (values are ours: step ranges and JSON text, one line each, no quoting needed), then the
        # file
        head = "".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
            for k, v in (fields or {}).items()
        )
        self.head = (
            head + f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{safe}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
        self.tail = f"\r\n--{boundary}--\r\n".encode()
        self.fh, self.size, self.progress = fh, size, progress
        self.sent = 0
        self._parts = [self.head, None, self.tail]

    def __len__(self):
        return len(self.head) + self.size + len(self.tail)

    def read(self, n: int = -1) -> bytes:
        out = b""
        while self._parts and (n < 0 or len(out) < n):
            part = self._parts[0]
            want = -1 if n < 0 else n - len(out)
            if part is None:
                chunk = self.fh.read(want)
                if not chunk:
                    self._parts.pop(0)
                    continue
            else:
                chunk = part if want < 0 else part[:want]
                rest = part[len(chunk) :]
                if rest:
                    self._parts[0] = rest
                else:
                    self._parts.pop(0)
            out += chunk
        self.sent += len(out)
        if self.progress is not None and out:
            self.progress(self.sent, len(self))
        return out
