"""The run page is fast and light, measured in the system Chromium against the live server (static files through
WhiteNoise, as collected for production): every figure drawn within 1.5 s of navigation and at most 0.5 MB
transferred on a first visit with an empty cache; scripts and styles under content-hashed names, gzip-compressed and
cached for a year, so a second visit fetches only the page and its figures' data. The numbers are written to
test-artifacts/run-page-speed.json.

The byte and cache checks hold on any machine. The 1.5 s is a statement about a machine that is not busy with other
work: when the load average per core is above 1 as the test starts (other suites running on a 2-core machine), the
time is measured and written down but not judged, and the test says so."""

from __future__ import annotations

import json
import os

import pytest

from ..browser import ARTIFACTS, BrowserTestCase, browser_marks
from ..conftest import gz, jsonl, records

pytestmark = browser_marks
TARGET_MS = 1500
TARGET_BYTES = 0.5e6  # the run-verdict issue's target: 0.5 MB cold (bench/pages.py measures it)

MEASURE = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const resources = performance.getEntriesByType("resource");
  const drawn = performance.getEntriesByName("figures-drawn")[0];
  return {
    figures_drawn_ms: drawn ? drawn.startTime : null,
    dom_content_loaded_ms: nav.domContentLoadedEventEnd,
    transferred_bytes: nav.transferSize + resources.reduce((n, r) => n + r.transferSize, 0),
    decoded_bytes: nav.decodedBodySize + resources.reduce((n, r) => n + r.decodedBodySize, 0),
    resources: resources.map((r) => ({url: r.name.replace(location.origin, ""), transferred: r.transferSize,
                                      decoded: r.decodedBodySize, start_ms: Math.round(r.startTime), ms: Math.round(r.duration)})),
    response_end_ms: nav.responseEnd,
  };
}"""


class RunPageSpeedTest(BrowserTestCase):
    broker = "memory"

    def test_run_page_figures_within_the_target_and_static_files_long_cached(self):
        load_per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
        upload, _ = self.processed_upload(
            "speed.jsonl.gz", gz(jsonl(records(trajectories=64, seed=7))), ("validate_upload", "certify_upload")
        )
        page = self.page
        self.sign_in()
        statics = {}
        page.on("response", lambda r: "/static/" in r.url and statics.setdefault(r.url, (r.status, r.all_headers())))
        url = f"{self.live_server_url}/p/{self.project.slug}/runs/{upload.run_id}/"
        # a first visit with an empty cache (the sign-in page loaded only the stylesheet and live.js)
        cdp = self.context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.clearBrowserCache")
        page.goto(url)
        page.wait_for_function("document.body.dataset.figures === 'ready'")
        first = page.evaluate(MEASURE)
        for fig in ("fig-bounds", "fig-steps", "fig-dist", "fig-status", "fig-length"):
            assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
            assert page.locator(f"#{fig} .skeleton").count() == 0, fig  # the placeholder went with the draw
        # every script and stylesheet: a hashed name, gzip, cached for a year
        assert statics, "no static file was requested"
        for src, (status, headers) in statics.items():
            assert status == 200, src
            assert (
                "immutable" in headers.get("cache-control", "") and "max-age=315360000" in headers["cache-control"]
            ), (src, headers.get("cache-control"))
            if src.endswith((".js", ".css")):
                assert headers.get("content-encoding") == "gzip", (src, headers)
        plotly = [r for r in first["resources"] if "plotly" in r["url"]]
        assert len(plotly) == 1 and "plotly-basic.min." in plotly[0]["url"] and plotly[0]["transferred"] < 500_000
        # a second visit: the static files come from the cache
        page.reload()
        page.wait_for_function("document.body.dataset.figures === 'ready'")
        second = page.evaluate(MEASURE)
        cached = [r for r in second["resources"] if "/static/" in r["url"]]
        assert cached and all(r["transferred"] == 0 for r in cached), cached
        (ARTIFACTS / "run-page-speed.json").write_text(
            json.dumps(
                {
                    "first_visit": first,
                    "second_visit": second,
                    "load_per_core": load_per_core,
                    "targets": {"figures_drawn_ms": TARGET_MS, "transferred_bytes": TARGET_BYTES},
                },
                indent=2,
            )
        )
        self.screenshot("run-page-fast.png")
        assert first["transferred_bytes"] <= TARGET_BYTES, first
        assert first["figures_drawn_ms"] is not None, first
        if load_per_core > 1:
            pytest.skip(
                f"figures drawn at {first['figures_drawn_ms']:.0f} ms with the machine busy (load "
                f"{load_per_core:.1f} per core): the {TARGET_MS} ms target is judged on a quiet machine; bytes "
                f"and caching were checked"
            )
        assert first["figures_drawn_ms"] <= TARGET_MS, first
