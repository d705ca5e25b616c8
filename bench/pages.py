"""Page weight and draw time of the portal's pages, cold, in the system Chromium, against a production-shaped portal.

The portal is the one ``bench/portal_env.py`` builds (private PostgreSQL and Redis, ``scripts/web``'s uvicorn with
DEBUG off, static files collected and served compressed by WhiteNoise, a prefork Celery worker). It is seeded with
``--runs`` certified runs (30 by default, the size of project the run-verdict issue was judged with). Each page is
then loaded ``--repeats`` times, each time in a fresh browser context with an empty cache (a first visit), and the
script prints the median bytes transferred, bytes decoded and the time until the page says it is drawn: for pages
with figures the ``figures-drawn`` mark (``static/js/run.js``), else the load event.

Targets (issue #28): the run page at most 0.5 MB transferred cold and drawn within 1.5 s on an idle machine. Every
time is also printed as a ratio to the login page's load time measured in the same process, the baseline: a ratio
stays comparable on a busy machine, where the absolute time does not (the load average is printed too).

    .venv/bin/python bench/pages.py                       # 30 runs, 5 cold loads per page (about 4 minutes)
    .venv/bin/python bench/pages.py --runs 5 --repeats 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.load import session_cookie
from bench.portal_env import PortalEnv, multipart, request, synth_log, wait_until

CHROMIUM = "/usr/bin/chromium"
TARGET_BYTES = 500_000
TARGET_MS = 1500

MEASURE = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const resources = performance.getEntriesByType("resource");
  const drawn = performance.getEntriesByName("figures-drawn")[0];
  return {
    drawn_ms: drawn ? drawn.startTime : nav.loadEventEnd,
    figures: Boolean(drawn),
    transferred: nav.transferSize + resources.reduce((n, r) => n + r.transferSize, 0),
    decoded: nav.decodedBodySize + resources.reduce((n, r) => n + r.decodedBodySize, 0),
    requests: 1 + resources.length,
  };
}"""


def seed_runs(env: PortalEnv, runs: int) -> int:
    """``runs`` runs through the API, each its own run id; the first is the measured one (64 trajectories, the
    size the run-page speed test uses), the others small. Returns the measured run's id once all jobs finished."""
    for i in range(runs):
        log = synth_log(64 if i == 0 else 6, seed=20_000 + i, response_len=(8, 64), run_id=f"bench-run-{i:03d}")
        body, ctype = multipart(log, f"run-{i:03d}.jsonl.gz")
        status, _, _ = request(
            "POST", f"{env.base_urls[0]}/api/v1/projects/{env.slug}/uploads/", env.token, body, ctype
        )
        if status != 201:
            raise RuntimeError(f"upload {i} answered {status}")
    pending = "select count(*) from jobs_job where state not in ('succeeded','failed','cancelled')"
    if not wait_until(lambda: int(env.sql(pending)[0][0]) == 0, 900, 1.0):
        raise RuntimeError(f"jobs still pending after 900 s; see {env.logs}")
    rows = env.sql(
        "select r.id, count(c.id) from runs_run r join certificates_runcertificate c on c.run_id = r.id "
        "and c.state = 'complete' where r.name = 'bench-run-000' group by r.id"
    )
    certified = int(
        env.sql("select count(distinct run_id) from certificates_runcertificate where state='complete'")[0][0]
    )
    print(f"seeded {runs} runs, {certified} certified", flush=True)
    if not rows:
        raise RuntimeError(f"the measured run was not certified; see {env.logs}")
    return int(rows[0][0])


def pages(env: PortalEnv, run_id: int) -> dict[str, str]:
    slug = env.slug
    return {
        "login (baseline)": "/login/",
        "run page": f"/p/{slug}/runs/{run_id}/",
        "runs table": f"/p/{slug}/runs/",
        "project": f"/p/{slug}/",
        "sequences": f"/p/{slug}/runs/{run_id}/sequences/",
        "kernels": f"/p/{slug}/kernels/",
        "glossary": "/glossary/",
    }


def load_once(browser, base: str, path: str, cookie: str | None) -> dict:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        if cookie:
            context.add_cookies([{"name": "sessionid", "value": cookie, "url": base}])
        page = context.new_page()
        response = page.goto(base + path, wait_until="load")
        status = response.status if response else 0
        # pages that draw figures (run, compare, fidelity) say so on <body> once drawn
        if page.evaluate("() => Boolean(document.querySelector('#run-figures, #figures, [data-figures-url]'))"):
            try:
                page.wait_for_function("document.body.dataset.figures === 'ready'", timeout=30_000)
            except Exception as exc:  # noqa: BLE001 - a page that never draws is reported, not fatal to the bench
                return {"status": status, "error": f"figures never drawn: {exc}"}
        return {"status": status, **page.evaluate(MEASURE)}
    finally:
        context.close()


def measure(env: PortalEnv, run_id: int, cookie: str, repeats: int) -> dict:
    from playwright.sync_api import sync_playwright

    base = env.base_urls[0]
    results = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        try:
            for name, path in pages(env, run_id).items():
                cookie_for = None if name.startswith("login") else cookie
                loads = [load_once(browser, base, path, cookie_for) for _ in range(repeats)]
                ok = [x for x in loads if "error" not in x and x["status"] == 200]
                if not ok:
                    results[name] = {"path": path, "error": loads[-1]}
                    continue
                results[name] = {
                    "path": path,
                    "transferred": statistics.median(x["transferred"] for x in ok),
                    "decoded": statistics.median(x["decoded"] for x in ok),
                    "drawn_ms": statistics.median(x["drawn_ms"] for x in ok),
                    "figures": ok[0]["figures"],
                    "requests": ok[0]["requests"],
                    "loads": len(ok),
                }
        finally:
            browser.close()
    return results


def report(results: dict) -> None:
    baseline = results.get("login (baseline)", {}).get("drawn_ms") or None
    print(f"{'page':<18} {'transferred':>12} {'decoded':>10} {'drawn':>9} {'x login':>8}  target")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<18} ERROR {r['error']}")
            continue
        ratio = f"{r['drawn_ms'] / baseline:.1f}" if baseline else "-"
        verdict = ""
        if name == "run page":
            verdict = (
                f"bytes {r['transferred'] / TARGET_BYTES:.2f} of {TARGET_BYTES / 1e6:.1f} MB, "
                f"time {r['drawn_ms'] / TARGET_MS:.2f} of {TARGET_MS / 1000:.1f} s"
            )
        print(
            f"{name:<18} {r['transferred'] / 1e3:>9.0f} kB {r['decoded'] / 1e3:>7.0f} kB "
            f"{r['drawn_ms']:>6.0f} ms {ratio:>8}  {verdict}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="certified runs to seed (default 30)")
    parser.add_argument("--repeats", type=int, default=5, help="cold loads per page (default 5)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--worktree", action="store_true", help="run the working tree (default: git HEAD exported)")
    args = parser.parse_args()
    if not os.path.exists(CHROMIUM):
        print(f"error: {CHROMIUM} is missing (apt-get install -y chromium)", file=sys.stderr)
        return 2
    env = PortalEnv(pg_port=55632, redis_port=56579, web_port=58201, snapshot=not args.worktree)
    try:
        env.setup()
        env.manage("collectstatic", "--noinput", "-v0")
        env.start_web(1)
        env.start_worker("pages", queues="cpu")
        run_id = seed_runs(env, args.runs)
        cookie = session_cookie(env)
        la_before = os.getloadavg()
        started = time.monotonic()
        results = measure(env, run_id, cookie, args.repeats)
        print(
            f"machine: {os.cpu_count()} CPUs, load average {la_before[0]:.2f} before and "
            f"{os.getloadavg()[0]:.2f} after the {time.monotonic() - started:.0f} s of page loads"
        )
        report(results)
    finally:
        env.teardown()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
