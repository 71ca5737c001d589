"""POST /v1/jobs answered by the fast handler (rest.fast_submit) is the same API as FastAPI's
route: two servers built alike from fakes (sequential ids, a manual clock), one with the fast
handler and one without, get the same requests and must give byte-identical answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.inbound.rest import create_app
from gpu_platform.adapters.inbound.rest.fast_submit import FastSubmit
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.wired import admin_and_user, use_fakes


class Server:
    def __init__(self, client: TestClient, app: FastAPI, secrets: dict[str, str]) -> None:
        self.client, self.app, self.secrets = client, app, secrets

    def post(self, body: bytes, headers: dict[str, str]) -> Any:
        return self.client.post("/v1/jobs", content=body, headers=headers)


def submit(pair: tuple[Server, Server], body: object, who: str | None, **headers: str) -> Any:
    """POST to both servers (so their ids stay in step); the fast one's answer, checked to be
    the other's."""
    answers = []
    for server in pair:
        sent = dict(headers)
        if who is not None:
            sent["Authorization"] = f"Bearer {server.secrets[who]}"
        answers.append(server.client.post("/v1/jobs", json=body, headers=sent))
    assert answers[0].content == answers[1].content
    return answers[0]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    inventory = Inventory((), source="sim", simulated=True)  # no node: every job stays queued
    containers: list[Container] = []
    servers: list[Server] = []
    try:
        for fast in (True, False):
            container = Container(
                settings=Settings(
                    server_id=0,
                    data_dir=tmp_path_factory.mktemp("fast" if fast else "slow"),
                    schedule_interval_seconds=3600,  # no cycle changes a job between answers
                    grpc_port=-1,
                    auth="on",
                    rate_limit_per_second=0,
                    auth_failures_per_minute=0,
                )
            )
            containers.append(container)
            use_fakes(container, inventory)
            admin, user = admin_and_user(container)
            access = container.access()
            app = create_app(
                container.jobs_api(),
                access=access,
                trail=container.audit_trail(),
                fast_submit=fast,
            )
            client = TestClient(app).__enter__()
            servers.append(Server(client, app, {"admin": admin.secret, "user": user.secret}))
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.client.__exit__(None, None, None)
        for container in containers:
            container.shutdown_resources()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 5000) | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=4,
)
FIELDS = ["command", "gpus", "tasks", "env", "name", "tenant", "priority", "image", "bogus"]
valid = st.fixed_dictionaries(
    {"command": st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=3)},
    optional={
        "gpus": st.integers(0, 3),
        "tasks": st.integers(1, 2),
        "priority": st.integers(-2, 2),
        "name": st.text(max_size=6),
        "env": st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,4}", fullmatch=True), st.text()),
        "preemptible": st.booleans(),
        "nvlink": st.sampled_from(["none", "preferred", "required", "always"]),
        "time_limit_s": st.floats(0.5, 100),
        "depends_on": st.lists(st.sampled_from(["j-000001", "j-999999"]), max_size=1),
        "max_attempts": st.integers(0, 3),
        "tenant": st.sampled_from(["default", "acme", "no such"]),
        "user": st.sampled_from(["alice", "root", "-x"]),
    },
)
bodies = st.one_of(
    valid.map(lambda b: json.dumps(b).encode()),
    valid.map(lambda b: json.dumps(b, indent=1).encode()),
    st.dictionaries(st.sampled_from(FIELDS), json_values).map(lambda b: json.dumps(b).encode()),
    st.sampled_from([b"", b"{", b"[]", b"null", b'{"command": ["a"], "command": 7}']),
)
requests = st.tuples(
    bodies,
    st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", None]),
    st.sampled_from([None, "admin", "user", "nobody", "Basic abc", "Bearer"]),
    st.sampled_from([None, "alice", "x" * 128, "x" * 129, ""]),
    st.sampled_from([None, "key-1", "key-2", "not a key!", ""]),
)


def _headers(
    server: Server, content_type: str | None, who: str | None, actor: str | None, key: str | None
) -> dict[str, str]:
    headers = {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if who in ("admin", "user", "nobody"):
        headers["Authorization"] = f"Bearer {server.secrets.get(who, 'gp_nobody')}"
    elif who is not None:
        headers["Authorization"] = who
    if actor is not None:
        headers["X-Actor"] = actor
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests)
def test_the_fast_handler_answers_every_submit_byte_for_byte_as_fastapi_does(
    pair: tuple[Server, Server], request: tuple[bytes, str | None, str | None, Any, Any]
) -> None:
    body, content_type, who, actor, key = request
    fast, slow = pair
    a = fast.post(body, _headers(fast, content_type, who, actor, key))
    b = slow.post(body, _headers(slow, content_type, who, actor, key))
    assert (a.status_code, a.headers.multi_items(), a.content) == (
        b.status_code,
        b.headers.multi_items(),
        b.content,
    )


def test_a_plain_submit_is_answered_by_the_fast_handler_and_an_invalid_one_by_fastapi(
    pair: tuple[Server, Server],
) -> None:
    fast, _ = pair
    handler: FastSubmit = fast.app.state.fast_submit
    answered, handed_over = handler.answered, handler.handed_over
    ok = submit(pair, {"command": ["true"]}, "admin")
    assert ok.status_code == 201 and ok.json()["state"] == "QUEUED"
    assert (handler.answered, handler.handed_over) == (answered + 1, handed_over)
    bad = submit(pair, {"command": ["true"], "gpus": -1}, "admin")
    assert bad.status_code == 422 and bad.json()["field"] == "gpus"
    assert bad.headers["content-type"] == "application/problem+json"
    assert (handler.answered, handler.handed_over) == (answered + 1, handed_over + 1)


def test_a_fast_submit_without_a_token_is_401_with_the_bearer_challenge(
    pair: tuple[Server, Server],
) -> None:
    fast, _ = pair
    handler: FastSubmit = fast.app.state.fast_submit
    answered = handler.answered
    r = submit(pair, {"command": ["true"]}, None)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert handler.answered == answered + 1  # the fast handler asked, the problem handler said no


def test_an_idempotent_retry_through_the_fast_handler_returns_the_same_job(
    pair: tuple[Server, Server],
) -> None:
    first = submit(pair, {"command": ["true"]}, "user", **{"Idempotency-Key": "retry-1"})
    again = submit(pair, {"command": ["true"]}, "user", **{"Idempotency-Key": "retry-1"})
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"] and first.json()["tenant"] == "acme"
