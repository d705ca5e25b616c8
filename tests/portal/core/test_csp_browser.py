"""The pages work under the *enforced* Content-Security-Policy (as in production): in the system Chromium, the
project page, the run page's Plotly figures, the fidelity page and a call drill-down, and the Swagger UI render with
no CSP violation reported by the browser."""

from __future__ import annotations

from django.test import override_settings

from ..browser import BrowserTestCase, browser_marks
from ..conftest import gz, jsonl, records

pytestmark = browser_marks

RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + (e.sourceFile || "")));
"""


class EnforcedCspBrowserTest(BrowserTestCase):
    broker = "memory"  # jobs run synchronously in the test
    username = "cspuser"
    project_name = "CSP Lab"

    @classmethod
    def setUpClass(cls):
        cls._csp = override_settings(CONTENT_SECURITY_POLICY_REPORT_ONLY=False)
        cls._csp.enable()  # before the live server starts, so its process enforces the policy too
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls._csp.disable()

    def visit(self, path: str, ready: str) -> None:
        page = self.page
        response = page.goto(f"{self.live_server_url}{path}")
        assert "content-security-policy-report-only" not in response.headers, path
        assert "script-src 'self' 'nonce-" in response.headers["content-security-policy"], path
        page.wait_for_selector(ready, state="attached")
        page.wait_for_timeout(300)  # let late violations (scripts run after load) arrive
        violations = page.evaluate("window.__csp")
        assert violations == [], f"{path}: {violations}"

    def test_pages_render_under_the_enforced_policy(self):
        from audit_portal.fidelity.models import FidelityReport

        upload, _ = self.processed_upload(
            "csp.jsonl.gz", gz(jsonl(records(trajectories=6))), ("validate_upload", "certify_upload", "fidelity_audit")
        )
        call = FidelityReport.objects.get(upload=upload).calls.order_by("line").first()

        self.context.add_init_script(RECORD_VIOLATIONS)
        self.sign_in()
        slug = self.project.slug
        self.visit(f"/p/{slug}/", "#job-feed")
        self.visit(f"/p/{slug}/runs/{upload.run_id}/", "body[data-figures=ready]")
        assert self.page.locator("#fig-bounds .main-svg").count() >= 1
        self.visit(f"/p/{slug}/runs/{upload.run_id}/fidelity/", "body[data-figures=ready]")
        assert self.page.locator("[data-figure] .main-svg").count() >= 1
        self.visit(f"/p/{slug}/fidelity/calls/{call.pk}/", "#tokens")
        self.visit(f"/p/{slug}/uploads/", "body")
        self.visit("/api/docs/", ".swagger-ui .info")
        self.screenshot("csp-swagger.png")
