"""Any screen, any person, in the system Chromium: axe-core (vendored from the npm registry, tests/portal/vendor/)
finds no serious or critical violation on any page, light or dark; on a 390 px phone nothing overflows sideways and
the menu opens to reach every link and sign-out; dark mode follows the system setting; the keyboard reaches a token's
details in the call drill-down; the API docs load nothing from another origin. Screenshots in test-artifacts/."""

from __future__ import annotations

import json
from pathlib import Path

from ..browser import ARTIFACTS, BrowserTestCase, browser_marks
from ..conftest import gz, jsonl, records
from ..dashboards.test_runs_table_browser import synthetic_runs

pytestmark = browser_marks
AXE = (Path(__file__).parents[1] / "vendor" / "axe.min.js").read_text()


class AccessibilityTest(BrowserTestCase):
    broker = "memory"

    def setUp(self):
        super().setUp()
        self.upload, _ = self.processed_upload(
            "a11y.jsonl.gz",
            gz(jsonl(records(trajectories=8, seed=3))),
            ("validate_upload", "certify_upload", "fidelity_audit"),
        )
        self.others = synthetic_runs(self.project, 29)  # the 30 runs: a full table page and its pager

    def pages(self) -> list[str]:
        from django.urls import reverse

        from audit_portal.fidelity.models import FidelityCall
        from audit_portal.jobs.models import Job

        slug, up = self.project.slug, self.upload
        job = Job.objects.filter(subject_id=up.pk, kind="certify_upload").first()
        call = FidelityCall.objects.filter(report__upload=up).order_by("line").first()
        cert = up.certificate.pk
        from audit_portal.kernels.selectors import latest_contracts

        from ..world import kernels_training_and_an_alert

        # three kernel submissions (the list's diff radios), a training audit's page, the alerts page with a rule
        world = kernels_training_and_an_alert(self.project)
        subs, audit = world.submissions, world.training_audit
        contract = next(c for c in latest_contracts() if c.contract_class == "C-PRC-01")
        from audit_portal.dashboards.models import SavedView  # the runs page with a saved view: its delete form

        SavedView.objects.get_or_create(
            project=self.project, owner=self.user, name="lowest B*", query="sort=best_bound"
        )
        return [
            f"/p/{slug}/",
            f"/p/{slug}/uploads/",
            f"/p/{slug}/uploads/{up.pk}/",
            f"/p/{slug}/runs/",
            f"/p/{slug}/runs/{up.run_id}/",
            f"/p/{slug}/runs/{up.run_id}/sequences/",
            f"/p/{slug}/compare/?c={cert}&c={cert}",
            f"/p/{slug}/compare/?c={cert}&c={self.others[0].certificates.get().pk}",  # two runs: the API export line
            f"/p/{slug}/compare/",
            f"/jobs/{job.pk}/",
            "/glossary/",
            f"/p/{slug}/keys/",
            f"/p/{slug}/runs/{up.run_id}/fidelity/",
            f"/p/{slug}/fidelity/calls/{call.pk}/",
            f"/p/{slug}/fidelity/tokenizers/",
            f"/p/{slug}/training/",
            f"/p/{slug}/kernels/",
            f"/p/{slug}/kernels/submit/",
            "/contracts/",
            reverse("kernels:contract", args=[contract.contract_id]),
            f"/p/{slug}/training/{audit.pk}/",
            f"/p/{slug}/alerts/",
            f"/p/{slug}/kernels/submissions/{subs[1].pk}/",
            f"/p/{slug}/kernels/diff/?a={subs[0].pk}&b={subs[1].pk}",
        ]

    def axe(self, page) -> list[dict]:
        page.add_script_tag(content=AXE)
        result = page.evaluate("""() => axe.run(document, {resultTypes: ["violations"]}).then((r) =>
            r.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) =>
              ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" "))})))""")
        return result

    def settle(self, page):
        page.wait_for_load_state("networkidle")
        if page.evaluate(
            "!!document.getElementById('run-figures') || !!document.getElementById('compare-figures')"
            " || !!document.querySelector('[data-figure]')"
        ):  # fidelity and training pages
            page.wait_for_function("document.body.dataset.figures === 'ready'")

    def test_no_serious_violations_on_any_page_light_and_dark(self):
        page = self.page
        page.goto(f"{self.live_server_url}/login/")
        found = {"/login/": self.axe(page)}
        self.sign_in()
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            for path in self.pages():
                response = page.goto(self.live_server_url + path)
                assert response.status == 200, path
                self.settle(page)
                if path.endswith("/alerts/"):  # open a rule's edit form, so that axe reads it too
                    page.click("details.rule-edit summary")
                found[f"{path} ({scheme})"] = self.axe(page)
                if path.endswith("/alerts/"):
                    self.screenshot(f"alerts-page-{scheme}.png")
                if path.startswith("/contracts/C-"):  # the contract read as a document, kept to look at
                    self.screenshot(f"contract-page-{scheme}.png")
        bad = {k: v for k, v in found.items() if v}
        (ARTIFACTS / "axe-violations.json").write_text(json.dumps(found, indent=1))
        assert not bad, bad

    def test_phone_width_without_overflow_menu_reaches_sign_out(self):
        phone = self.browser.new_context(
            viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True, has_touch=True
        )
        page = phone.new_page()
        page.set_default_timeout(20000)
        self.page, keep = page, self.page
        try:
            self.sign_in()
            widths = {}
            for path in self.pages():
                page.goto(self.live_server_url + path)
                self.settle(page)
                widths[path] = page.evaluate("document.documentElement.scrollWidth")
            (ARTIFACTS / "phone-widths.json").write_text(json.dumps(widths, indent=1))
            assert all(w <= 390 for w in widths.values()), widths
            page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{self.upload.run_id}/")
            self.settle(page)
            self.screenshot("phone-run-page.png")
            assert not page.is_visible("#sign-out")  # behind the menu button
            page.click("#nav-toggle")
            assert page.get_attribute("#nav-toggle", "aria-expanded") == "true"
            box = page.locator("#sign-out").bounding_box()
            assert page.is_visible("#sign-out") and box["x"] >= 0 and box["x"] + box["width"] <= 390
            self.screenshot("phone-menu-open.png")
        finally:
            self.page = keep
            phone.close()

    def test_dark_mode_follows_the_system(self):
        page = self.page
        self.sign_in()
        page.emulate_media(color_scheme="dark")
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/runs/{self.upload.run_id}/")
        self.settle(page)
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        card = page.evaluate("getComputedStyle(document.querySelector('.card')).backgroundColor")
        assert background == "rgb(15, 20, 30)" and card == "rgb(23, 30, 43)", (background, card)
        axis_text = page.evaluate("getComputedStyle(document.querySelector('#fig-steps .xtick text')).fill")
        assert axis_text == "rgb(228, 233, 242)", axis_text  # the figures' text follows the theme
        self.screenshot("dark-run-page.png")
        page.emulate_media(color_scheme="light")
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(246, 247, 249)"

    def test_keyboard_reaches_a_tokens_details(self):
        from audit_portal.fidelity.models import FidelityCall

        call = FidelityCall.objects.filter(report__upload=self.upload, n_tokens__gt=2).order_by("line").first()
        page = self.page
        self.sign_in()
        page.goto(f"{self.live_server_url}/p/{self.project.slug}/fidelity/calls/{call.pk}/")
        page.wait_for_selector("#tokens .tok")
        page.focus("#tokens .tok >> nth=0")
        page.keyboard.press("ArrowRight")
        page.wait_for_function("document.getElementById('token-detail').dataset.pos === '1'")
        assert page.evaluate("document.activeElement.dataset.pos") == "1"
        assert "#1" in page.inner_text("#token-detail")

    def test_api_docs_load_nothing_from_another_origin(self):
        page = self.page
        self.sign_in()
        outside = []
        page.on(
            "request",
            lambda r: r.url.startswith(("http://", "https://"))
            and not r.url.startswith(self.live_server_url)
            and outside.append(r.url),
        )
        page.goto(self.live_server_url + "/api/docs/")
        page.wait_for_selector(".swagger-ui .info")
        page.wait_for_load_state("networkidle")
        assert not outside, outside
        assert page.goto(self.live_server_url + "/api/redoc/").status == 404  # dropped: it loaded fonts from a CDN
