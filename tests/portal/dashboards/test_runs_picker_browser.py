"""static/js/runs.js in the system Chromium: the column picker's choice is remembered when the address names no
columns, and runs ticked on different pages of the runs table are compared together, with a chosen baseline."""

from __future__ import annotations

from ..browser import BrowserTestCase, browser_marks
from ..core.test_a11y_browser import AXE
from .test_runs_table_browser import synthetic_runs

pytestmark = browser_marks


class RunsPickerTest(BrowserTestCase):
    def setUp(self):
        super().setUp()
        from audit_portal.runs.models import Run

        runs = synthetic_runs(self.project, 30)
        for i, run in enumerate(runs):
            Run.objects.filter(pk=run.pk).update(config={"lr": i / 1000, "seed": 1}, state="finished")

    def axe(self, page) -> list[dict]:
        page.add_script_tag(content=AXE)
        return page.evaluate("""() => axe.run(document, {resultTypes: ["violations"]}).then((r) =>
            r.violations.filter((v) => v.impact === "serious" || v.impact === "critical").map((v) =>
              ({id: v.id, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" "))})))""")

    def test_columns_remembered_and_selection_kept_across_pages(self):
        page = self.page
        self.sign_in()
        url = f"{self.live_server_url}/p/{self.project.slug}/runs/"
        page.goto(url + "?sort=name")
        page.click("#column-picker summary")
        page.check('input[name="cols"][value="status"]')
        page.check('input[name="cols"][value="params.lr"]')
        page.click("#runs-apply")
        page.wait_for_url("**cols=params.lr*")
        assert page.locator('#runs-table th[data-column="params.lr"]').count() == 1
        page.goto(url)  # no cols in the address: the browser's last choice is applied
        page.wait_for_url("**cols=status*")
        assert page.locator('#runs-table th[data-column="status"]').count() == 1

        page.goto(url + "?sort=name")
        first = page.get_attribute('#runs-table tbody tr:first-child input[name="c"]', "value")
        page.check('#runs-table tbody tr:first-child input[name="c"]')
        page.click("#page-next")
        page.wait_for_url("**page=2*")
        assert page.inner_text("#compare-count") == "1 selected"
        last = page.get_attribute('#runs-table tbody tr:last-child input[name="c"]', "value")
        page.check('#runs-table tbody tr:last-child input[name="c"]')
        assert page.inner_text("#compare-count") == "2 selected"
        page.click("#compare-selected")
        page.wait_for_url("**/compare/?c=*")
        assert page.locator(".compared .card").count() == 2
        page.check(f'#baseline-form input[name="base"][value="{last}"]')
        page.click("#baseline-apply")
        page.wait_for_url(f"**base={last}*")
        assert page.inner_text("#run-1") == "sweep-29" and page.inner_text("#run-2") == "sweep-00"
        assert page.locator('#params-diff tr[data-key="lr"]').count() == 1 and first
        # axe on the states the page-wide a11y test does not reach: the params diff, the picker open
        page.wait_for_function("document.body.dataset.figures === 'ready'")
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            assert not self.axe(page), scheme
        page.goto(url + "?cols=status,duration,tags,params.lr&q=tag:x or params.lr > 0.01")
        page.click("#column-picker summary")
        assert not self.axe(page)
