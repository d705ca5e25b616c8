"""The negotiated-protocol gateway (docs/fcr.md#negotiated-protocol) end to end on loopback, against a tiny
OpenAI-compatible fake engine (toy tokenizer)."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest

from workers.fcr import validate_file
from workers.fidelity import audit_file
from workers.fidelity.gateway import make_gateway

from .conftest import TASK_LIST_FILES


class FakeEngine:
    """Renders messages with the toy template (docs/fcr.md#toy-tokenizer), answers 'ls -la<|end|>' with ids, log-probs and top-K."""

    def __init__(self, toy, model):
        self.toy, self.model, self.requests = toy, model, []
        eng = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                eng.requests.append((self.path, body))
                text = (
                    "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in body.get("messages", [])) + "<|assistant|>"
                )
                prompt = eng.toy.encode(text)
                ids = [20, 21, 3]
                lps = [-0.105361, -0.510826, -0.01005]
                content = [
                    {
                        "token": f"token_id:{i}",
                        "logprob": lp,
                        "bytes": None,
                        "top_logprobs": [
                            {"token": f"token_id:{i}", "logprob": lp},
                            {"token": "token_id:24", "logprob": lp - 3},
                        ][: body.get("top_logprobs", 0)],
                    }
                    for i, lp in zip(ids, lps)
                ]
                resp = {
                    "id": "chatcmpl-x",
                    "object": "chat.completion",
                    "model": eng.model,
                    "prompt_token_ids": prompt if body.get("return_token_ids") else None,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "ls -la"},
                            "logprobs": {"content": content} if body.get("logprobs") else None,
                            "token_ids": ids if body.get("return_token_ids") else None,
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": len(prompt), "completion_tokens": 3},
                }
                if self.path.endswith("/v1/completions"):  # vLLM completions shape
                    resp = {
                        "id": "cmpl-x",
                        "object": "text_completion",
                        "model": eng.model,
                        "choices": [
                            {
                                "index": 0,
                                "text": "ls -la<|end|>",
                                "token_ids": ids,
                                "prompt_token_ids": body["prompt"],
                                "finish_reason": "stop",
                                "logprobs": {
                                    "tokens": [f"token_id:{i}" for i in ids],
                                    "token_logprobs": lps,
                                    "top_logprobs": [{f"token_id:{i}": lp} for i, lp in zip(ids, lps)],
                                },
                            }
                        ],
                        "usage": {"completion_tokens": 3},
                    }
                data = json.dumps(resp).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def engines(toy):
    pol, frozen = FakeEngine(toy, "toy-policy"), FakeEngine(toy, "toy-frozen")
    yield pol, frozen
    pol.close()
    frozen.close()


def start(**kw):
    gw = make_gateway(host="127.0.0.1", port=0, **kw)
    threading.Thread(target=gw.serve_forever, daemon=True).start()
    return gw


def call(gw, path, body, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", gw.server_address[1], timeout=30)
    try:
        conn.request(
            "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})}
        )
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


MSGS = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List files"}]


def test_gateway_reject_mode_end_to_end(tmp_path, engines, toy):
    pol, _ = engines
    log = tmp_path / "gw.jsonl"
    gw = start(
        upstream=pol.url,
        log_path=log,
        run_id="run-gw",
        step=7,
        top_logprobs=2,
        tokenizer=toy,
        logprobs_mode="processed_logprobs",
        generation_config_source="request_only",
        chat_template_sha256="t" * 64,
    )
    try:
        st, _, body = call(
            gw,
            "/fcr/session",
            {
                "trajectory_id": "tG",
                "declares_roles": True,
                "append_only": True,
                "template_sha256": "t" * 64,
                "task_prompt_sha256": TASK_LIST_FILES,
            },
        )
        assert st == 200 and json.loads(body)["undeclared"] == "reject"
        st, hdr, body = call(
            gw,
            "/v1/chat/completions",
            {"model": "toy-policy", "messages": MSGS},
            {"X-FCR-Trajectory": "tG", "X-FCR-Call-Role": "policy", "X-FCR-Purpose": "main_loop"},
        )
        assert st == 200 and hdr["X-FCR-Call-Id"] == "tG/0"
        assert json.loads(body)["choices"][0]["message"]["content"] == "ls -la"
        path, sent = pol.requests[-1]
        assert path == "/v1/chat/completions"
        assert sent["logprobs"] is True and sent["top_logprobs"] == 2 and sent["return_token_ids"] is True
        # undeclared: 409, never forwarded, never logged
        n_before = len(pol.requests)
        st, _, body = call(gw, "/v1/chat/completions", {"model": "toy-policy", "messages": MSGS})
        assert st == 409 and json.loads(body)["error"]["code"] == "undeclared_call"
        assert len(pol.requests) == n_before
        # a declared background call is forwarded and logged as background
        st, hdr, _ = call(
            gw,
            "/v1/chat/completions",
            {"model": "toy-policy", "messages": MSGS, "max_tokens": 8},
            {"X-FCR-Trajectory": "tG", "X-FCR-Call-Role": "background", "X-FCR-Purpose": "title"},
        )
        assert st == 200 and hdr["X-FCR-Call-Id"] == "tG/1"
        # streaming client: one chunk + [DONE]
        st, hdr, body = call(
            gw,
            "/v1/chat/completions",
            {"model": "toy-policy", "messages": MSGS, "stream": True},
            {"X-FCR-Trajectory": "tG", "X-FCR-Call-Role": "background"},
        )
        assert st == 200 and body.endswith(b"data: [DONE]\n\n") and "stream" not in pol.requests[-1][1]
    finally:
        gw.shutdown()
        gw.server_close()
    recs = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    assert [(r["call_id"], r["role"], r["role_source"]) for r in recs] == [
        ("tG/0", "policy", "header"),
        ("tG/1", "background", "header"),
        ("tG/2", "background", "header"),
    ]
    assert recs[0]["prompt"]["task_prompt_sha256_declared"] == TASK_LIST_FILES
    assert recs[0]["prompt"]["token_ids"] == [0, 40, 41, 42, 43, 46, 3, 1, 44, 45, 3, 2]
    assert recs[0]["rollout"]["top_k"][0] == [[20, -0.105361], [24, -3.105361]]
    assert validate_file(log)["valid"]
    rep = audit_file(log, tokenizer=toy)
    c = {x["call_id"]: x for x in rep["calls"]}
    # everything the gateway can prove passes; only the trainer's recompute is missing
    assert c["tG/0"]["reasons"] == ["TRAINER_LOGPROB_MISSING"] and c["tG/0"]["lineage"] == "root-ok"
    assert c["tG/1"]["primary_reason"] == "BACKGROUND_CALL"
    assert rep["coverage"]["calls"]["spurious_call_rate"] == 0
    assert rep["coverage"]["background_ledger"]["background:title"] == {"calls": 1, "tokens": 3}


def test_gateway_route_frozen(tmp_path, engines, toy):
    pol, frozen = engines
    log = tmp_path / "gw.jsonl"
    gw = start(upstream=pol.url, log_path=log, undeclared="route_frozen", frozen_upstream=frozen.url)
    try:
        st, hdr, _ = call(gw, "/v1/chat/completions", {"model": "toy-policy", "messages": MSGS})
        assert st == 200 and hdr["X-FCR-Call-Id"] == "undeclared/0"
        assert len(frozen.requests) == 1 and len(pol.requests) == 0  # never reached the policy
        st, _, _ = call(
            gw,
            "/v1/completions",
            {"model": "toy-policy", "prompt": [1, 44, 45, 3, 2]},
            {"X-FCR-Trajectory": "t2", "X-FCR-Call-Role": "policy"},
        )
        assert st == 200 and pol.requests[-1][1]["logprobs"] == 5
    finally:
        gw.shutdown()
        gw.server_close()
    recs = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    assert (recs[0]["role"], recs[0]["purpose"], recs[0]["model"]["served_name"]) == (
        "background",
        "undeclared_routed_frozen",
        "toy-frozen",
    )
    assert recs[1]["engine"]["logprobs_mode"] is None  # not declared → R7 will fail closed
    assert recs[1]["prompt"]["provenance"] == "engine" and recs[1]["prompt"]["token_ids"] == [1, 44, 45, 3, 2]
    assert recs[1]["response"]["text"] == "ls -la<|end|>" and recs[1]["rollout"]["logprobs"][2] == -0.01005


def test_gateway_upstream_down(tmp_path):
    gw = start(upstream="http://127.0.0.1:9", log_path=tmp_path / "x.jsonl")
    try:
        st, _, body = call(
            gw, "/v1/chat/completions", {"messages": MSGS}, {"X-FCR-Trajectory": "t", "X-FCR-Call-Role": "policy"}
        )
        assert st == 502 and json.loads(body)["error"]["code"] == "upstream_unreachable"
        assert call(gw, "/v1/other", {})[0] == 404
    finally:
        gw.shutdown()
        gw.server_close()
    assert not (tmp_path / "x.jsonl").exists()
