"""The web dashboard in headless Chromium (Debian package `chromium`, driven by Playwright
through `executable_path`; nothing downloads a browser) against a real `gpu-platform serve`
with authentication on and the simulated 8-GPU inventory.

Each page is screenshotted under the test's tmp dir (`shots/`) and checked with axe-core
(vendored in tests/system/axe, MPL-2.0): no serious or critical violations. Without chromium
the tests skip, except with GPU_PLATFORM_REQUIRE_SYSTEM_TESTS=1.
"""

from __future__ import annotations

import json
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_platform.testing.system import require, require_tool
from tests.integration.conftest import Server, wait_for

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]

AXE = Path(__file__).with_name("axe") / "axe-4.14.1.min.js"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STATES = ("AVAILABLE", "ALLOCATED", "IN_USE", "DRAINING", "DEGRADED", "RESETTING", "OFFLINE")
WAIT_MS = 20_000
PRINTER = (
    "import time\nfor i in range(3): print('step', i, flush=True); time.sleep(0.3)\ntime.sleep(600)"
)


@pytest.fixture
def chromium() -> Iterator[Any]:
    path = require_tool("chromium", "chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - part of .[dev]
        require(False, "playwright is not installed (pip install -e '.[dev]')")
        raise
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Cluster:
    """The server, its admin token, and a viewer token made through the API."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.admin = (server.data_dir / "admin-token").read_text().strip()
        self.viewer = self.api(
            "POST", "/v1/tokens", json={"name": "vera", "tenant": "default", "role": "viewer"}
        ).json()["token"]

    def api(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.admin}"}
        r = httpx.request(method, self.server.url + path, headers=headers, timeout=10, **kw)
        assert r.status_code < 300, r.text
        return r

    def gpu_counts(self) -> dict[str, int]:
        seen = Counter(g["state"] for g in self.api("GET", "/v1/gpus").json())
        return {s: seen.get(s, 0) for s in STATES}


@pytest.fixture
def cluster(server_factory: Callable[..., Server]) -> Cluster:
    return Cluster(server_factory(GPU_PLATFORM_AUTH="on"))


def login(browser: Any, c: Cluster, token: str) -> Any:
    """A browser context logged in with `token` (CSP bypassed only so axe can be injected)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    page = context.new_page()
    page.goto(c.server.url + "/")
    assert page.url.endswith("/login?next=/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(c.server.url + "/")
    return context


def shoot(page: Any, shots: Path, name: str) -> None:
    """Screenshot the whole page and fail on serious or critical axe-core violations."""
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
            .map(v => ({id: v.id, impact: v.impact, help: v.help,
                        nodes: v.nodes.slice(0, 3).map(n => n.target.join(" "))}))"""
    )
    serious = [v for v in found if v["impact"] in ("serious", "critical")]
    assert not serious, f"{name}: {serious}"


def counts_on(page: Any) -> dict[str, int]:
    return {s: int(page.locator(f'[data-count="{s}"] strong').inner_text().strip()) for s in STATES}


def test_the_cluster_page_counts_gpus_by_state_and_a_submitted_job_runs_on_the_open_pages(
    chromium: Any, cluster: Cluster, tmp_path: Path
) -> None:
    shots = tmp_path / "shots"
    context = login(chromium, cluster, cluster.admin)
    page = context.pages[0]
    assert counts_on(page) == cluster.gpu_counts() == {**dict.fromkeys(STATES, 0), "AVAILABLE": 8}
    assert page.locator("li.gpu").count() == 8
    page.get_by_text("node-0: GPU/NIC matrix").click()  # the topology opens on click
    assert page.locator("table.matrix th", has_text="GPU7").count() == 2
    shoot(page, shots, "cluster")

    queue = context.new_page()
    queue.goto(cluster.server.url + "/queue")
    for p in (page, queue):  # a marker a reload would lose
        p.evaluate("window.notReloaded = true")
        p.wait_for_function("() => window.htmx && document.querySelector('[sse-connect]')")

    quota = {"gpus": 4, "cohort": "pool", "borrowing_limit": 2}
    cluster.api("PUT", "/v1/quotas/default", json=quota)
    spec = {"command": [sys.executable, "-c", PRINTER], "gpus": 2, "name": "printer"}
    job = cluster.api("POST", "/v1/jobs", json=spec).json()
    row = queue.locator(f'tr.job-row[data-job="{job["id"]}"]')
    row.wait_for(timeout=WAIT_MS)
    queue.wait_for_function(
        f"""() => document.querySelector('tr.job-row[data-job="{job["id"]}"]')
                 ?.dataset.state === "RUNNING" """,
        timeout=WAIT_MS,
    )
    assert "printer" in row.inner_text()
    # the cluster page follows: two GPUs held by the job, in whichever held state the API says
    assert wait_for(lambda: cluster.gpu_counts()["AVAILABLE"] == 6)
    page.wait_for_function(
        """() => document.querySelector('[data-count="AVAILABLE"] strong').textContent.trim()
                 === "6" """,
        timeout=WAIT_MS,
    )
    assert counts_on(page) == cluster.gpu_counts()
    held = page.locator(f'li.gpu:has(a[href="/jobs/{job["id"]}"])')
    assert held.count() == 2
    assert all(p.evaluate("window.notReloaded === true") for p in (page, queue))
    shoot(page, shots, "cluster-running")
    shoot(queue, shots, "queue")

    job_page = context.new_page()
    job_page.goto(f"{cluster.server.url}/jobs/{job['id']}")
    job_page.wait_for_function(
        "() => document.getElementById('log').textContent.includes('step 2')", timeout=WAIT_MS
    )
    assert job_page.locator("#job-state").inner_text() == "running"
    shoot(job_page, shots, "job")

    tenants = context.new_page()  # while the job holds 2 GPUs of its tenant's 4
    tenants.goto(cluster.server.url + "/tenants?hours=1")
    row = tenants.locator('tr[data-tenant="default"]')
    assert row.locator("meter").get_attribute("value") == "2"
    assert row.locator("meter").get_attribute("max") == "4"
    assert tenants.locator("svg.chart rect").count() >= 1
    shoot(tenants, shots, "tenants")

    job_page.get_by_role("button", name="Cancel job").click()
    job_page.wait_for_function(
        "() => document.getElementById('job-state')?.textContent === 'cancelled'",
        timeout=WAIT_MS,
    )
    assert cluster.api("GET", f"/v1/jobs/{job['id']}").json()["state"] == "CANCELLED"
    queue.wait_for_function(
        f"""() => document.querySelector('tr.job-row[data-job="{job["id"]}"]')
                 ?.dataset.state === "CANCELLED" """,
        timeout=WAIT_MS,
    )

    services = context.new_page()
    services.goto(cluster.server.url + "/services")
    assert "No services yet" in services.inner_text("main")
    shoot(services, shots, "services")
    context.close()


def test_draining_a_gpu_from_the_admin_page_recolours_it_live_and_is_audited(
    chromium: Any, cluster: Cluster, tmp_path: Path
) -> None:
    shots = tmp_path / "shots"
    context = login(chromium, cluster, cluster.admin)
    grid = context.pages[0]
    grid.wait_for_function("() => window.htmx && document.querySelector('[sse-connect]')")
    tile = grid.locator('li.gpu[data-gpu="node-0:3"]')
    before = tile.evaluate("e => getComputedStyle(e).backgroundColor")
    grid.evaluate("window.notReloaded = true")

    admin = context.new_page()
    admin.goto(cluster.server.url + "/admin")
    shoot(admin, shots, "admin")
    row = admin.locator('tr[data-gpu="node-0:3"]')
    row.get_by_label("Reason for GPU node-0:3").fill("fan noise")
    row.get_by_role("button", name="Drain").click()
    admin.wait_for_url(cluster.server.url + "/admin")
    assert "drain: GPU node-0:3" in admin.locator(".flash-ok").inner_text()

    grid.wait_for_function(
        """() => document.querySelector('li.gpu[data-gpu="node-0:3"]').dataset.state
                 === "DRAINING" """,
        timeout=WAIT_MS,
    )
    after = tile.evaluate("e => getComputedStyle(e).backgroundColor")
    assert after != before
    assert grid.evaluate("window.notReloaded === true")
    assert counts_on(grid) == {**dict.fromkeys(STATES, 0), "AVAILABLE": 7, "DRAINING": 1}
    shoot(grid, shots, "cluster-draining")

    entries = cluster.api("GET", "/v1/audit").json()
    drains = [e for e in entries if e["target"] == "gpu node-0:3" and e["action"] == "drain"]
    assert len(drains) == 1, entries
    assert drains[0]["reason"] == "fan noise" and drains[0]["outcome"] == "ok"
    assert drains[0]["actor"] == "bootstrap-admin"  # the logged-in token's name
    admin.locator("#audit td", has_text="fan noise").wait_for(timeout=WAIT_MS)
    # open event streams do not hold the server up: SIGTERM ends it with the pages still open
    assert cluster.server.stop(signal.SIGTERM) == 0
    assert '"stopped"' in cluster.server.log.read_text()
    context.close()


def test_a_viewer_sees_no_admin_buttons_and_is_refused_with_403(
    chromium: Any, cluster: Cluster, tmp_path: Path
) -> None:
    shots = tmp_path / "shots"
    context = login(chromium, cluster, cluster.viewer)
    page = context.pages[0]
    assert "vera" in page.locator("#whoami").inner_text()
    assert page.get_by_role("link", name="Admin").count() == 0
    assert page.get_by_role("button", name="Drain").count() == 0
    shoot(page, shots, "viewer-cluster")
    job = cluster.api("POST", "/v1/jobs", json={"command": ["sleep", "600"], "gpus": 1}).json()
    page.goto(f"{cluster.server.url}/jobs/{job['id']}")
    assert page.get_by_role("button", name="Cancel job").count() == 0

    assert page.goto(cluster.server.url + "/admin").status == 403
    shoot(page, shots, "viewer-admin-403")
    page.goto(cluster.server.url + "/")
    csrf = page.evaluate("JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token']")
    status = page.evaluate(
        """async ([csrf]) => (await fetch("/ui/actions/gpus/node-0/0", {method: "POST",
              headers: {"Content-Type": "application/x-www-form-urlencoded"},
              body: new URLSearchParams({csrf, action: "drain", reason: "x"}),
              redirect: "manual"})).status""",
        [csrf],
    )
    assert status == 403
    cancel = page.evaluate(
        """async ([csrf, id]) => (await fetch(`/ui/actions/jobs/${id}/cancel`, {method: "POST",
              headers: {"X-CSRF-Token": csrf}, redirect: "manual"})).status""",
        [csrf, job["id"]],
    )
    assert cancel == 403
    gpu0 = next(g for g in cluster.api("GET", "/v1/gpus").json() if g["index"] == 0)
    assert gpu0["state"] in ("AVAILABLE", "ALLOCATED", "IN_USE")
    assert cluster.api("GET", f"/v1/jobs/{job['id']}").json()["state"] != "CANCELLED"
    chain = (cluster.server.data_dir / "audit.jsonl").read_text().splitlines()
    refused = [e for e in map(json.loads, chain) if e["actor"] == "vera"]
    assert {e["action"] for e in refused} == {"hardware.action", "job.cancel"}
    assert all(e["outcome"].startswith("refused") and e["role"] == "viewer" for e in refused)
    context.close()


def test_the_login_page_refuses_a_wrong_token_and_passes_axe(
    chromium: Any, cluster: Cluster, tmp_path: Path
) -> None:
    page = chromium.new_context(bypass_csp=True).new_page()
    page.goto(cluster.server.url + "/login")
    page.get_by_label("Token").fill("not-a-token")
    with page.expect_response(lambda r: r.url.endswith("/login")) as answer:
        page.get_by_role("button", name="Log in").click()
    assert answer.value.status == 401
    assert "not valid" in page.locator(".flash-error").inner_text()
    shoot(page, tmp_path / "shots", "login-refused")
    cookies = page.context.cookies()
    assert not [c for c in cookies if c["name"] == "gpu_platform_session"]
