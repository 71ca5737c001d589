"""The web dashboard without a browser: pages and fragments rendered by the real REST app,
built through the real container (authentication on, SQLite token store, the audit chain)
with in-memory job fakes. Browser behaviour (live swaps, colours, axe) is in
tests/system/test_dashboard_browser.py."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dependency_injector import providers
from fastapi.testclient import TestClient
from markupsafe import escape

from gpu_platform.adapters.inbound.web.session import COOKIE
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.tenancy import Principal, Role
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryGpuDiscovery,
    InMemoryJobStore,
    SequentialJobIds,
)

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class Dash:
    def __init__(self, container: Container, client: TestClient, runner: FakeJobRunner) -> None:
        self.container, self.client, self.runner = container, client, runner
        boot = container.access().bootstrap()
        assert boot is not None
        self.admin = boot.secret
        root = Principal("root", "default", Role.ADMIN, boot.info.token_id)
        self.viewer = container.access().create_token(root, "vera", "default", Role.VIEWER).secret

    def browser(self, token: str | None) -> TestClient:
        """A fresh client (its own cookie jar), logged in with `token` when given."""
        c = TestClient(self.client.app, follow_redirects=False)
        if token is not None:
            r = c.post("/login", data={"token": token, "next": "/"})
            assert r.status_code == 303, r.text
        return c

    def csrf(self, c: TestClient) -> str:
        m = CSRF.search(c.get("/").text)
        assert m is not None
        return m.group(1)

    def api(self, method: str, path: str, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.admin}"}
        r = self.client.request(method, path, headers=headers, **kw)
        assert r.status_code < 300, r.text
        return r.json()

    def audit_chain(self) -> list[dict[str, Any]]:
        return list(self.container.adapters.audit_log().tail(100))


def built(
    tmp_path: Path, inventory: Inventory, auth: str
) -> Iterator[tuple[TestClient, Container, FakeJobRunner]]:
    """The real REST app with the dashboard, through the container, with job fakes."""
    settings = Settings(
        server_id=0,
        data_dir=tmp_path,
        schedule_interval_seconds=0.05,
        auth=auth,  # type: ignore[arg-type]
        grpc_port=-1,
    )
    container = Container(settings=settings)
    runner = FakeJobRunner()
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(runner))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.init_resources()
    try:
        with TestClient(container.rest_app(), follow_redirects=False) as client:
            yield client, container, runner
    finally:
        container.shutdown_resources()


@pytest.fixture
def dash(tmp_path: Path, inventory: Inventory) -> Iterator[Dash]:
    for client, container, runner in built(tmp_path, inventory, "on"):
        yield Dash(container, client, runner)


def test_with_authentication_off_a_visitor_is_let_in_without_a_form(
    tmp_path: Path, inventory: Inventory
) -> None:
    for client, _, _ in built(tmp_path, inventory, "off"):
        r = client.get("/queue")
        assert r.status_code == 303 and r.headers["location"] == "/login?next=/queue"
        r = client.get(r.headers["location"])
        assert r.status_code == 303 and r.headers["location"] == "/queue"
        page = client.get("/queue")
        assert page.status_code == 200 and "dashboard · default · admin" in page.text


def counts(html: str) -> dict[str, int]:
    found = re.findall(r'data-count="(\w+)">.*?<strong>(\d+)</strong>', html)
    return {state: int(n) for state, n in found}


def test_pages_send_a_visitor_without_a_session_to_the_login_form(dash: Dash) -> None:
    c = dash.browser(None)
    for path in ("/", "/queue", "/tenants", "/services", "/admin", "/jobs/j-1"):
        r = c.get(path)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), path
    assert c.get("/ui/fragments/gpus").status_code == 401
    assert c.get("/ui/events").status_code == 401
    assert c.post("/ui/actions/gpus/node-0/0", data={"action": "drain"}).status_code == 401


def test_a_wrong_token_is_refused_and_a_good_one_gets_a_strict_httponly_cookie(
    dash: Dash,
) -> None:
    c = dash.browser(None)
    r = c.post("/login", data={"token": "nope", "next": "/queue"})
    assert r.status_code == 401 and "not valid" in r.text
    assert COOKIE not in r.headers.get("set-cookie", "")
    r = c.post("/login", data={"token": dash.admin, "next": "/queue"})
    assert r.status_code == 303 and r.headers["location"] == "/queue"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert dash.admin not in r.headers["set-cookie"]  # the token stays on the server


def test_login_sends_only_to_local_paths(dash: Dash) -> None:
    c = dash.browser(None)
    for evil in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        r = c.post("/login", data={"token": dash.admin, "next": evil})
        assert r.headers["location"] == "/", evil


def test_the_gpu_fragment_counts_every_state_and_shows_each_gpu(dash: Dash) -> None:
    c = dash.browser(dash.admin)
    html = c.get("/ui/fragments/gpus").text
    assert counts(html) == {
        "AVAILABLE": 8,
        "ALLOCATED": 0,
        "IN_USE": 0,
        "DRAINING": 0,
        "DEGRADED": 0,
        "RESETTING": 0,
        "OFFLINE": 0,
    }
    assert len(re.findall(r'<li class="gpu state-available"', html)) == 8
    assert 'data-gpu="node-0:7"' in html


def test_a_drain_from_the_dashboard_changes_the_fragment_and_is_audited(dash: Dash) -> None:
    c = dash.browser(dash.admin)
    token = dash.csrf(c)
    r = c.post(
        "/ui/actions/gpus/node-0/3",
        data={"csrf": token, "action": "drain", "reason": "fan noise", "back": "/admin"},
    )
    assert r.status_code == 303 and r.headers["location"] == "/admin"
    html = c.get("/ui/fragments/gpus").text
    assert counts(html)["DRAINING"] == 1
    assert re.search(r'class="gpu state-draining" data-gpu="node-0:3"', html)
    assert "drain: GPU node-0:3" in c.get("/admin").text  # the one-time message
    (entry,) = dash.api("GET", "/v1/audit")
    assert entry["action"] == "drain" and entry["target"] == "gpu node-0:3"
    assert entry["reason"] == "fan noise" and entry["actor"] == "bootstrap-admin"


def test_a_post_without_the_session_csrf_token_is_refused(dash: Dash) -> None:
    c = dash.browser(dash.admin)
    for data in ({"action": "drain"}, {"action": "drain", "csrf": "forged"}):
        assert c.post("/ui/actions/gpus/node-0/3", data=data).status_code == 403
    assert counts(c.get("/ui/fragments/gpus").text)["DRAINING"] == 0
    token = dash.csrf(c)
    r = c.post(
        "/ui/actions/gpus/node-0/3", data={"action": "drain"}, headers={"X-CSRF-Token": token}
    )
    assert r.status_code == 303  # the header works as well as the form field


def test_an_unknown_action_names_the_field(dash: Dash) -> None:
    c = dash.browser(dash.admin)
    r = c.post("/ui/actions/gpus/node-0/3", data={"csrf": dash.csrf(c), "action": "explode"})
    assert r.status_code == 422 and "action" in r.text


def test_a_refused_action_says_why_on_the_page(dash: Dash) -> None:
    c = dash.browser(dash.admin)
    r = c.post("/ui/actions/gpus/node-9/0", data={"csrf": dash.csrf(c), "action": "drain"})
    assert r.status_code == 303
    assert "refused:" in c.get("/").text


def test_a_viewer_sees_no_admin_controls_and_gets_403_with_an_audited_refusal(
    dash: Dash,
) -> None:
    job = dash.api("POST", "/v1/jobs", json={"command": ["fake-forever"], "gpus": 1})
    c = dash.browser(dash.viewer)
    page = c.get("/").text
    assert 'href="/admin"' not in page and "Drain" not in page
    assert "Cancel job" not in c.get(f"/jobs/{job['id']}").text
    assert c.get("/admin").status_code == 403
    token = dash.csrf(c)
    assert (
        c.post("/ui/actions/nodes/node-0", data={"csrf": token, "action": "drain"}).status_code
        == 403
    )
    r = c.post(f"/ui/actions/jobs/{job['id']}/cancel", data={"csrf": token})
    assert r.status_code == 403
    refused = [e for e in dash.audit_chain() if e["actor"] == "vera"]
    assert [e["action"] for e in refused] == ["hardware.action", "job.cancel"]
    assert dash.api("GET", f"/v1/jobs/{job['id']}")["state"] != "CANCELLED"
    bearer = {"Authorization": f"Bearer {dash.viewer}"}  # the API agrees: viewers only read
    assert dash.client.get("/v1/jobs", headers=bearer).status_code == 200
    spec = {"command": ["fake-forever"], "gpus": 1}
    assert dash.client.post("/v1/jobs", json=spec, headers=bearer).status_code == 403


def test_the_queue_shows_why_a_job_waits_and_the_job_page_its_placement(dash: Dash) -> None:
    big = dash.api("POST", "/v1/jobs", json={"command": ["fake-forever"], "gpus": 8})
    small = dash.api("POST", "/v1/jobs", json={"command": ["fake-forever"], "gpus": 1})
    deadline = time.monotonic() + 10
    while dash.api("GET", f"/v1/jobs/{big['id']}")["state"] != "RUNNING":
        dash.runner.deliver()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    while dash.api("GET", f"/v1/jobs/{small['id']}")["pending"] is None:  # a cycle saw it
        assert time.monotonic() < deadline
        time.sleep(0.01)
    why = dash.api("GET", f"/v1/jobs/{small['id']}")["pending"]["message"]
    c = dash.browser(dash.admin)
    html = c.get("/ui/fragments/queue?state=QUEUED").text
    assert small["id"] in html and big["id"] not in html
    assert html.count('class="job-row"') == 1 and str(escape(why)) in html
    page = c.get(f"/jobs/{big['id']}").text
    assert "node-0" in page and "0, 1, 2, 3, 4, 5, 6, 7" in page
    history = re.findall(r"<tr><td>[^<]*</td><td>([^<]*)</td><td>([a-z]+)</td>", page)
    assert history == [("\u2013", "queued"), ("1", "scheduled"), ("1", "running")]
    assert f'data-follow="/ui/jobs/{big["id"]}/log"' in page
    assert c.get("/queue?state=BOGUS").status_code == 422


def test_the_tenants_page_draws_usage_and_the_services_page_lists_what_exists(
    dash: Dash,
) -> None:
    c = dash.browser(dash.admin)
    dash.api("PUT", "/v1/quotas/default", json={"gpus": 4})
    page = c.get("/tenants?hours=1").text
    assert '<svg class="chart" role="img"' in page and 'data-tenant="default"' in page
    assert "<title" in page
    assert c.get("/tenants?hours=5").status_code == 422
    assert "No services yet" in c.get("/services").text
    body = {"name": "web", "command": ["fake-forever"], "replicas": 1}
    assert dash.api("POST", "/v1/services", json=body)["name"] == "web"
    assert 'data-service="web"' in c.get("/services").text


def test_static_files_are_served_with_the_vendored_htmx(dash: Dash) -> None:
    c = dash.browser(None)
    assert c.get("/ui/static/vendor/htmx-2.0.11.min.js").status_code == 200
    assert c.get("/ui/static/vendor/htmx-ext-sse-2.2.4.min.js").status_code == 200
    assert c.get("/ui/static/dashboard.css").status_code == 200


def test_dashboard_routes_stay_out_of_the_openapi_document(dash: Dash) -> None:
    paths = json.loads(dash.client.get("/openapi.json").text)["paths"]
    assert not [p for p in paths if not p.startswith(("/v1/", "/healthz"))]


def test_the_event_stream_carries_only_the_jobs_the_visitor_may_see(dash: Dash) -> None:
    access = dash.container.access()
    root = Principal("root", "default", Role.ADMIN)
    access.create_tenant(root, "a")
    user = access.create_token(root, "ann", "a", Role.USER).secret
    c = dash.browser(user)
    with c.stream("GET", "/ui/events") as events:
        assert events.headers["content-type"].startswith("text/event-stream")
        lines = events.iter_lines()
        assert next(lines) == "retry: 2000"
        assert next(lines) == "event: hello"
        theirs = dash.api(
            "POST", "/v1/jobs", json={"command": ["fake-forever"], "tenant": "default"}
        )
        mine = dash.api("POST", "/v1/jobs", json={"command": ["fake-forever"], "tenant": "a"})
        seen: list[str] = []
        for line in lines:
            if line.startswith("data: ") and "job_id" in line:
                seen.append(json.loads(line[6:])["job_id"])
                if seen[-1] == mine["id"]:
                    break
    assert theirs["id"] not in seen and seen[0] == mine["id"]


def test_logging_out_needs_the_csrf_token_and_ends_the_session(dash: Dash) -> None:
    c = dash.browser(dash.admin)
    token = dash.csrf(c)
    assert c.post("/logout", data={}).status_code == 403
    assert c.get("/").status_code == 200  # still logged in
    r = c.post("/logout", data={"csrf": token})
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert c.get("/").status_code == 303
