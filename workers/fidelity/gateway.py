"""Negotiated-protocol gateway (docs/fcr.md#negotiated-protocol): an OpenAI-compatible proxy that writes ``fcr/1``.

    python -m workers.fidelity gateway --upstream http://127.0.0.1:8000 --log run.fcr.jsonl \\
        [--undeclared reject|route_frozen --frozen-upstream URL] [--run-id R] [--step N] [--top-logprobs K]

* ``POST /fcr/session`` opens a trajectory session: ``{trajectory_id, declares_roles, append_only,
  template_sha256, task_prompt_sha256?}`` → ``{trajectory_id, undeclared: "reject"|"route_frozen"}``.
* ``POST /v1/chat/completions`` and ``/v1/completions`` need ``X-FCR-Trajectory`` and ``X-FCR-Call-Role``
  (``policy``|``background``; optional ``X-FCR-Purpose``, ``X-FCR-Parent-Call``). An undeclared call gets HTTP 409
  (``reject``) or goes to the frozen model (``route_frozen``; logged as ``background``/``config``, purpose
  ``undeclared_routed_frozen``) — it never reaches the policy as an unlabelled call.
* The gateway asks the engine for evidence: ``logprobs``/``top_logprobs=K`` (chat) or ``logprobs=K``
  (completions) and ``return_token_ids: true``. ``engine.logprobs_mode`` in the records is the *declared* server
  setting (``--logprobs-mode``; unset ⇒ null ⇒ R7 fails closed) unless ``request_logprobs_mode`` is on, in which
  case ``logprobs_mode: "processed_logprobs"`` is sent per request (engines that accept it). The upstream is always
  called without streaming (a streaming client gets one SSE chunk plus ``[DONE]``).
* Each answered call is appended to the log as one ``fcr/1`` record (the vLLM importer's
  mapping, docs/fidelity-rules.md#vllm-openai-compatible-logs, so the two paths
  cannot disagree); the response carries ``X-FCR-Call-Id``.

Standard library only (``http.server`` / ``http.client``); binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from workers.fidelity.importers.common import dump
from workers.fidelity.importers.vllm import convert_exchange

ROUTES = ("/v1/chat/completions", "/v1/completions")


class GatewayState:
    def __init__(
        self,
        *,
        upstream,
        log_path,
        undeclared="reject",
        frozen_upstream=None,
        run_id="run",
        step=0,
        top_logprobs=5,
        tokenizer=None,
        logprobs_mode=None,
        request_logprobs_mode=False,
        generation_config_source="unknown",
        chat_template_sha256=None,
        timeout=60.0,
    ):
        if undeclared not in ("reject", "route_frozen"):
            raise ValueError("undeclared must be 'reject' or 'route_frozen'")
        if undeclared == "route_frozen" and not frozen_upstream:
            raise ValueError("route_frozen needs a frozen upstream")
        self.upstream = urllib.parse.urlsplit(upstream)
        self.frozen = urllib.parse.urlsplit(frozen_upstream) if frozen_upstream else None
        self.log_path = log_path
        self.undeclared = undeclared
        self.run_id, self.step, self.top_logprobs = run_id, step, top_logprobs
        self.opts = {
            "run_id": run_id,
            "step": step,
            "steps": {},
            "tokenizer": tokenizer,
            "logprobs_mode": logprobs_mode,
            "generation_config_source": generation_config_source,
            "chat_template_sha256": chat_template_sha256,
        }
        self.request_logprobs_mode = request_logprobs_mode
        self.timeout = timeout
        self.lock = threading.Lock()
        self.sessions: dict[str, dict] = {}
        self.counters: dict[str, int] = {}
        self.stats = {"calls": 0, "rejected": 0, "routed_frozen": 0, "upstream_errors": 0}

    def next_index(self, traj) -> int:
        with self.lock:
            i = self.counters.get(traj, 0)
            self.counters[traj] = i + 1
            return i

    def append(self, rec):
        with self.lock, open(self.log_path, "ab") as fh:
            fh.write(dump(rec))


def _post(url: urllib.parse.SplitResult, path: str, body: dict, timeout: float):
    conn_cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(url.hostname, url.port, timeout=timeout)
    try:
        base = url.path.rstrip("/")
        conn.request("POST", base + path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _upstream_request(body: dict, chat: bool, state: GatewayState) -> dict:
    """The request sent upstream: not streamed, with the log-probs, top-K and token ids the record needs."""
    req = dict(body)
    req.pop("stream", None)
    req.pop("stream_options", None)
    if chat:
        req["logprobs"] = True
        req["top_logprobs"] = max(int(req.get("top_logprobs") or 0), state.top_logprobs)
    else:
        req["logprobs"] = max(int(req.get("logprobs") or 0), state.top_logprobs)
    req["return_token_ids"] = True
    req.pop("logprobs_mode", None)  # the record states the declared server setting, not a client wish
    if state.request_logprobs_mode:  # engines that take it per request (e.g. the Tmax vLLM fork)
        req["logprobs_mode"] = "processed_logprobs"
    return req


def _sse(resp: dict, chat: bool) -> bytes:
    """A non-streamed answer as the one-chunk event stream a streaming client asked for."""
    chunk = {
        "id": resp.get("id"),
        "object": "chat.completion.chunk" if chat else "text_completion",
        "model": resp.get("model"),
        "choices": [
            {
                "index": c.get("index", 0),
                "finish_reason": c.get("finish_reason"),
                **(
                    {"delta": {"role": "assistant", "content": (c.get("message") or {}).get("content")}}
                    if chat
                    else {"text": c.get("text")}
                ),
            }
            for c in resp.get("choices") or []
        ],
    }
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


def _route(state: GatewayState, h: dict):
    """``(upstream, trajectory, X-FCR headers)`` of a call, or None when an undeclared call is rejected: an
    undeclared call goes to the frozen upstream as ``background`` / ``undeclared_routed_frozen``."""
    traj, role = h.get("x-fcr-trajectory"), h.get("x-fcr-call-role")
    headers = {k: v for k, v in h.items() if k.startswith("x-fcr-")}
    if role in ("policy", "background") and traj:
        return state.upstream, traj, headers
    if state.undeclared == "reject":
        with state.lock:
            state.stats["rejected"] += 1
        return None
    traj = traj or "undeclared"
    headers.update(
        {"x-fcr-trajectory": traj, "x-fcr-call-role": "background", "x-fcr-purpose": "undeclared_routed_frozen"}
    )
    with state.lock:
        state.stats["routed_frozen"] += 1
    return state.frozen, traj, headers


def _record(state: GatewayState, req: dict, resp: dict, traj: str, headers: dict) -> str:
    """Convert and append the call's records (the vLLM importer's mapping); returns the call id. Raises what
    :func:`convert_exchange` raises for an unusable answer."""
    index = state.next_index(traj)
    call_id = f"{traj}/{index}"
    session = state.sessions.get(traj, {})
    meta = {
        "run_id": state.run_id,
        "trajectory_id": traj,
        "step": state.step,
        "call_index": index,
        "call_id": call_id,
        "headers": {k: v for k, v in headers.items()},
    }
    if index == 0 and session.get("task_prompt_sha256"):
        meta["task_prompt_sha256_declared"] = session["task_prompt_sha256"]
    recs = convert_exchange(
        {"request": req, "response": resp, "meta": meta},
        line=index,
        ref=f"gateway:{call_id}",
        opts=state.opts,
        call_index=index,
        retry=False,
    )
    for rec in recs:
        rec["source"]["format"] = "fcr_gateway"
        state.append(rec)
    with state.lock:
        state.stats["calls"] += 1
    return call_id


class _Handler(BaseHTTPRequestHandler):
    """The gateway's request handler; :func:`make_handler` binds it to a :class:`GatewayState`."""

    protocol_version = "HTTP/1.1"
    state: GatewayState

    def log_message(self, fmt, *args):  # quiet
        pass

    def _send(self, status, payload, headers=None, raw=None, content_type="application/json"):
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status, code, message):
        self._send(status, {"error": {"code": code, "message": message, "type": "fcr_gateway"}})

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return None

    def do_GET(self):
        if self.path == "/fcr/stats":
            return self._send(200, self.state.stats)
        return self._error(404, "not_found", self.path)

    def do_POST(self):
        body = self._body()
        if not isinstance(body, dict):
            return self._error(400, "bad_json", "request body must be a JSON object")
        if self.path == "/fcr/session":
            return self._session(body)
        if self.path not in ROUTES:
            return self._error(404, "not_found", self.path)
        return self._proxy(body)

    def _session(self, body):
        state = self.state
        traj = body.get("trajectory_id")
        if not isinstance(traj, str) or not traj:
            return self._error(400, "bad_session", "trajectory_id required")
        with state.lock:
            state.sessions[traj] = body
        return self._send(
            200,
            {
                "trajectory_id": traj,
                "undeclared": state.undeclared,
                "declares_roles": bool(body.get("declares_roles", True)),
            },
        )

    def _proxy(self, body):
        state = self.state
        route = _route(state, {k.lower(): v for k, v in self.headers.items()})
        if route is None:
            return self._error(
                409,
                "undeclared_call",
                "X-FCR-Trajectory and X-FCR-Call-Role (policy|background) are required in training mode",
            )
        upstream, traj, headers = route
        chat = self.path.endswith("chat/completions")
        req = _upstream_request(body, chat, state)
        try:
            status, raw = _post(upstream, self.path, req, state.timeout)
        except OSError as exc:
            with state.lock:
                state.stats["upstream_errors"] += 1
            return self._error(502, "upstream_unreachable", str(exc))
        if status != 200:
            with state.lock:
                state.stats["upstream_errors"] += 1
            return self._send(status, None, raw=raw)
        try:
            resp = json.loads(raw)
        except ValueError:
            return self._error(502, "upstream_bad_json", "upstream answered non-JSON")
        try:
            call_id = _record(state, req, resp, traj, headers)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return self._error(502, "upstream_unusable", f"cannot record the call: {exc}")
        out_headers = {"X-FCR-Call-Id": call_id}
        if not body.get("stream"):
            return self._send(200, resp, headers=out_headers)
        return self._send(200, None, headers=out_headers, raw=_sse(resp, chat), content_type="text/event-stream")


def make_handler(state: GatewayState):
    """A request handler class bound to ``state``."""
    return type("Handler", (_Handler,), {"state": state})


def make_gateway(*, upstream, log_path, host="127.0.0.1", port=0, **kw) -> ThreadingHTTPServer:
    """Build (not start) a gateway server; ``server.server_address`` has the bound port."""
    state = GatewayState(upstream=upstream, log_path=log_path, **kw)
    srv = ThreadingHTTPServer((host, port), make_handler(state))
    srv.daemon_threads = True
    srv.state = state
    return srv


def serve(args) -> int:
    tok = None
    if getattr(args, "tokenizer", None):
        from workers.fidelity.tokenizer import FidelityTokenizer

        tok = FidelityTokenizer.from_file(args.tokenizer)
    srv = make_gateway(
        upstream=args.upstream,
        log_path=args.log,
        host=args.host,
        port=args.port,
        undeclared=args.undeclared,
        frozen_upstream=args.frozen_upstream,
        run_id=args.run_id,
        step=args.step,
        top_logprobs=args.top_logprobs,
        tokenizer=tok,
        logprobs_mode=args.logprobs_mode,
        generation_config_source=args.generation_config_source,
    )
    print(
        f"fcr gateway on http://{srv.server_address[0]}:{srv.server_address[1]} → {args.upstream} "
        f"(undeclared: {args.undeclared}); log {args.log}",
        flush=True,
    )
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0
