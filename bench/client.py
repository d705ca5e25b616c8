"""The trainer client's cost: ``log_step`` time per token against a training step on the same machine, and what
``finish()`` costs after a long run (time after the last step, peak memory, bytes uploaded against bytes spooled).

    .venv/bin/python bench/client.py                      # 10,000 steps of 8 x 64 tokens, segments of 8 steps
    .venv/bin/python bench/client.py --steps 2000 --segment-steps 4 --topk 5

The portal is a stand-in HTTP server in this process (the real client, its real HTTP uploads): it stores nothing,
counts the bytes of every uploaded file and answers each run's live view as merged, so what is timed is the client
alone (the portal's own merge is bench/live_merge.py). The training step is a forward and backward pass of a small
causal transformer (torch, CPU) over a batch of the same shape: the number to compare ``log_step`` with.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "client")]

import numpy as np  # noqa: E402 - after the client folder is put on sys.path

from audit_portal_client import Client  # noqa: E402 - after the client folder is put on sys.path


class FakePortal(BaseHTTPRequestHandler):
    uploads: list[int] = []
    lock = threading.Lock()

    def log_message(self, *a):
        pass

    def _json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        if self.path.endswith("/uploads/"):
            with self.lock:
                FakePortal.uploads.append(n)
                uid = len(FakePortal.uploads)
            return self._json(201, {"id": uid, "stage": "received"})
        if self.path.endswith("/runs/"):
            return self._json(201, {"id": 1, "name": json.loads(body)["name"]})
        return self._json(200, {"id": 1, "state": "finished"})

    def do_GET(self):
        if self.path.endswith("/live/"):
            with self.lock:
                ids = list(range(1, len(FakePortal.uploads) + 1))
            if not ids:
                return self._json(404, {"error": {"code": "not_found", "message": "no live view"}})
            return self._json(
                200,
                {
                    "run": 1,
                    "steps": 0,
                    "merged_uploads": ids,
                    "skipped_uploads": [],
                    "summary": {"sequences": 0},
                    "best_bound": None,
                    "series": {"step": []},
                },
            )
        return self._json(404, {"error": {"code": "not_found", "message": self.path}})


def batch(rng, B, T, K):
    lp = -rng.random((B, T)).astype(np.float32) * 3
    out = dict(
        rollout_logprobs=lp,
        trainer_logprobs=lp + rng.normal(0, 1e-3, (B, T)).astype(np.float32),
        response_mask=(np.arange(T)[None, :] < rng.integers(T // 2, T + 1, (B, 1))).astype(np.int8),
        response_ids=rng.integers(0, 32000, (B, T)),
        prompt_ids=rng.integers(0, 32000, (B, 32)),
    )
    if K:
        ids = rng.integers(0, 32000, (B, T, K))
        out.update(
            rollout_topk_ids=ids,
            rollout_topk_logprobs=-rng.random((B, T, K)).astype(np.float32),
            trainer_topk_ids=ids,
            trainer_topk_logprobs=-rng.random((B, T, K)).astype(np.float32),
        )
    return out


def train_step_seconds(B, T, repeats=5) -> float | None:
    """A forward+backward of a small causal transformer (2 layers, width 256, vocab 32k) over [B, 32 + T] tokens."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    width, vocab = 256, 32000
    emb = torch.nn.Embedding(vocab, width)
    layer = torch.nn.TransformerEncoderLayer(width, 4, 4 * width, batch_first=True)
    body = torch.nn.TransformerEncoder(layer, 2)
    head = torch.nn.Linear(width, vocab)
    params = [*emb.parameters(), *body.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, 1e-4)
    x = torch.randint(0, vocab, (B, 32 + T))
    causal = torch.nn.Transformer.generate_square_subsequent_mask(32 + T)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        logits = head(body(emb(x), mask=causal, is_causal=True))
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), x[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--topk", type=int, default=0)
    ap.add_argument("--segment-steps", type=int, default=8)
    args = ap.parse_args(argv)

    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePortal)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    rng = np.random.default_rng(0)
    batches = [batch(rng, args.batch, args.tokens, args.topk) for _ in range(16)]
    tokens_per_step = [int(b["response_mask"].sum()) for b in batches]
    with tempfile.TemporaryDirectory() as tmp:
        run = Client(url, "bench").run(
            "bench", "bench-run", spool_dir=Path(tmp) / "spool", segment_steps=args.segment_steps
        )
        spooled = 0
        real_write = run._close_segment

        def counting_close():  # bytes written to the spool, for the "each byte uploaded once" check
            nonlocal spooled
            before = {p.name for p in run.spool.root.glob("seg-*.parquet")}
            real_write()
            spooled += sum(p.stat().st_size for p in run.spool.root.glob("seg-*.parquet") if p.name not in before)

        run._close_segment = counting_close
        log_times, tokens = [], 0
        t_run = time.perf_counter()
        for step in range(args.steps):
            b = batches[step % len(batches)]
            t0 = time.perf_counter()
            run.log_step(step, **b)
            log_times.append(time.perf_counter() - t0)
            tokens += tokens_per_step[step % len(batches)]
        t_last = time.perf_counter()
        run.finish(timeout=600)
        t_finish = time.perf_counter() - t_last
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    server.shutdown()
    uploaded = sum(FakePortal.uploads)
    per_step = float(np.median(log_times))
    per_token_us = 1e6 * sum(log_times) / tokens
    print(
        f"steps {args.steps}, batch {args.batch} x {args.tokens} tokens (top-K {args.topk}), segments of "
        f"{args.segment_steps} steps; {tokens} response tokens; loop {t_last - t_run:.1f} s"
    )
    print(
        f"log_step: median {1e3 * per_step:.2f} ms a step, {per_token_us:.2f} us a token "
        f"(p99 {1e3 * float(np.percentile(log_times, 99)):.2f} ms, max {1e3 * max(log_times):.1f} ms: segment "
        f"writes)"
    )
    train = train_step_seconds(args.batch, args.tokens)
    if train is not None:
        print(
            f"training step (2-layer causal transformer, width 256, vocab 32k, fwd+bwd+AdamW, CPU): "
            f"{1e3 * train:.1f} ms -> log_step is {100 * sum(log_times) / args.steps / train:.2f} % of it"
        )
    print(
        f"finish(): {t_finish:.2f} s after the last step; peak RSS {rss_mb:.0f} MB; {len(FakePortal.uploads)} "
        f"upload(s), {uploaded / 1e6:.1f} MB sent for {spooled / 1e6:.1f} MB spooled "
        f"({uploaded / max(1, spooled):.3f} x, multipart headers included)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
