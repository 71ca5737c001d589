"""The OpenAI-compatible gateway in a real `gpu-platform serve` (auth on, the gateway on its own
`gateway_port`), in front of real model server processes, driven by the official `openai`
client: chat, streaming, completions, embeddings, the models list, every refusal in the OpenAI
error shape, replicas that break off or say nothing (502, 504), a client that leaves, draining,
session affinity, usage and metrics, and a replica killed mid-stream. (The REST port's gateway,
the default, is driven by tests/integration/test_services_cluster.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from gpu_platform.ports.inbound.model_routes import ReplicaAddress
from gpu_platform.testing.model_routes import StaticModelRoutes
from gpu_platform.testing.model_server import (
    ModelServerProcess,
    completion_tokens,
    spawn_model_server,
)
from gpu_platform.testing.ports import read_ports
from gpu_platform.testing.scripted_replica import ScriptedReplica
from tests.integration.conftest import Server, wait_for

TOKENS_PER_MINUTE = 1000


@dataclass
class Gateway:
    server: Server
    admin: str
    ann: str  # a user of tenant team-a
    bob: str  # a user of tenant team-b
    routes: StaticModelRoutes
    routes_file: Path
    replicas: dict[str, ModelServerProcess]
    url: str  # the gateway's own port
    scripted: dict[str, ScriptedReplica]

    def client(self, key: str, **options: object) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, **options)

    def publish(self) -> None:
        self.routes.write(self.routes_file)


def _token(server: Server, admin: str, name: str, tenant: str) -> str:
    auth = {"Authorization": f"Bearer {admin}"}
    httpx.post(f"{server.url}/v1/tenants", json={"name": tenant}, headers=auth, timeout=10)
    r = httpx.post(
        f"{server.url}/v1/tokens",
        json={"name": name, "tenant": tenant, "role": "user"},
        headers=auth,
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    base = tmp_path_factory.mktemp("gateway")
    replicas: dict[str, ModelServerProcess] = {}
    scripted = {mode: ScriptedReplica(mode) for mode in ("close", "mute", "short")}
    server: Server | None = None
    try:
        for replica in scripted.values():
            replica.__enter__()
        for rid in ("t1", "t2", "t3"):
            replicas[rid] = spawn_model_server("tiny", replica_id=rid)
        for rid in ("s1", "s2"):  # slow streams, for killing one mid-stream
            replicas[rid] = spawn_model_server("slow", replica_id=rid, token_delay_ms=40)
        replicas["o1"] = spawn_model_server("other", replica_id="o1")
        routes = StaticModelRoutes()
        tiny = [ReplicaAddress(r, replicas[r].url) for r in ("t1", "t2", "t3")]
        routes.set_model("tiny", "team-a", tiny)
        routes.set_model(
            "slow", "team-a", [ReplicaAddress(r, replicas[r].url) for r in ("s1", "s2")]
        )
        routes.set_model("other", "team-b", [ReplicaAddress("o1", replicas["o1"].url)])
        routes.set_model(
            "idle", "team-a", [ReplicaAddress("i1", "http://127.0.0.1:9", ready=False)]
        )
        for mode, replica in scripted.items():  # models "close", "mute", "short"
            routes.set_model(mode, "team-b", [ReplicaAddress(mode, replica.url)])
        routes_file = base / "routes.json"
        routes.write(routes_file)
        env = {
            "GPU_PLATFORM_AUTH": "on",
            "GPU_PLATFORM_RATE_LIMIT_PER_SECOND": "0",
            "GPU_PLATFORM_GATEWAY_ROUTES_FILE": str(routes_file),
            "GPU_PLATFORM_GATEWAY_TOKENS_PER_MINUTE": str(TOKENS_PER_MINUTE),
            "GPU_PLATFORM_GATEWAY_MAX_BODY_BYTES": "65536",
            "GPU_PLATFORM_GATEWAY_READ_TIMEOUT_SECONDS": "2",
            "GPU_PLATFORM_GATEWAY_PORT": "0",  # any free port, reported in ports.json
        }
        server = Server(base / "data", env).start()
        admin = (server.data_dir / "admin-token").read_text().strip()
        ann = _token(server, admin, "ann", "team-a")
        bob = _token(server, admin, "bob", "team-b")
        url = f"http://127.0.0.1:{(read_ports(server.data_dir) or {})['gateway']}"
        yield Gateway(server, admin, ann, bob, routes, routes_file, replicas, url, scripted)
    finally:
        if server is not None and server.proc is not None:
            server.stop()
        for replica in replicas.values():
            replica.stop()
        for replica in scripted.values():
            if replica.url:
                replica.__exit__()


def test_a_chat_completion_comes_from_a_replica_with_its_usage(gateway: Gateway) -> None:
    answer = gateway.client(gateway.ann).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "one two three"}], max_tokens=4
    )
    assert answer.choices[0].message.content == "".join(completion_tokens("one two three", 4))
    assert answer.system_fingerprint in {"t1", "t2", "t3"}
    assert answer.usage is not None and answer.usage.prompt_tokens == 3


def test_a_stream_arrives_as_events_and_ends_with_usage(gateway: Gateway) -> None:
    stream = gateway.client(gateway.ann).chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "stream me"}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(completion_tokens("stream me", 5))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5


def test_completions_and_embeddings_pass_through(gateway: Gateway) -> None:
    client = gateway.client(gateway.ann)
    done = client.completions.create(model="tiny", prompt="a b", max_tokens=2)
    assert done.choices[0].text == "".join(completion_tokens("a b", 2))
    vectors = client.embeddings.create(model="tiny", input=["x", "y z"])
    assert [len(d.embedding) for d in vectors.data] == [8, 8]


def test_the_models_list_shows_only_the_callers_tenant_and_everything_to_an_admin(
    gateway: Gateway,
) -> None:
    ann = sorted(m.id for m in gateway.client(gateway.ann).models.list())
    admin = sorted(m.id for m in gateway.client(gateway.admin).models.list())
    assert ann == ["idle", "slow", "tiny"]
    assert admin == ["close", "idle", "mute", "other", "short", "slow", "tiny"]


def test_another_tenants_model_and_an_unknown_one_are_404_in_openai_shape(
    gateway: Gateway,
) -> None:
    client = gateway.client(gateway.ann)
    for model in ("other", "no-such-model"):
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model=model, messages=[])
        assert caught.value.code == "model_not_found" and model in caught.value.message
    assert gateway.client(gateway.bob).embeddings.create(model="other", input="x").data


def test_a_wrong_key_is_401(gateway: Gateway) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        gateway.client("not-a-key").models.list()
    assert caught.value.code == "invalid_api_key"
    missing = httpx.get(f"{gateway.url}/v1/models", timeout=10)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"


def test_malformed_json_and_a_missing_model_are_400_naming_the_problem(gateway: Gateway) -> None:
    auth = {"Authorization": f"Bearer {gateway.ann}"}
    url = f"{gateway.url}/v1/chat/completions"
    broken = httpx.post(url, content=b'{"model": ', headers=auth, timeout=10)
    nameless = httpx.post(url, json={"messages": []}, headers=auth, timeout=10)
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"
    assert nameless.status_code == 400 and "'model'" in nameless.json()["error"]["message"]


def test_a_body_over_the_limit_is_413_and_a_wrong_method_405(gateway: Gateway) -> None:
    auth = {"Authorization": f"Bearer {gateway.ann}"}
    url = f"{gateway.url}/v1/chat/completions"
    big = {"model": "tiny", "messages": [{"role": "user", "content": "x " * 40000}]}
    too_large = httpx.post(url, json=big, headers=auth, timeout=10)
    wrong = httpx.get(url, headers=auth, timeout=10)
    assert too_large.status_code == 413 and "65536" in too_large.json()["error"]["message"]
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


def test_a_model_without_a_ready_replica_is_503_with_retry_after(gateway: Gateway) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        gateway.client(gateway.ann).chat.completions.create(model="idle", messages=[])
    assert caught.value.status_code == 503 and caught.value.code == "no_ready_replica"
    assert caught.value.response.headers["retry-after"] == "1"


def test_the_gateway_port_serves_only_the_gateway_and_the_rest_port_none_of_it(
    gateway: Gateway,
) -> None:
    auth = {"Authorization": f"Bearer {gateway.admin}"}
    elsewhere = httpx.get(f"{gateway.url}/v1/jobs", headers=auth, timeout=10)
    assert elsewhere.status_code == 404 and elsewhere.json()["error"]["code"] == "unknown_url"
    rest = httpx.post(f"{gateway.server.url}/v1/chat/completions", json={}, headers=auth)
    assert rest.status_code == 404


def test_a_replica_that_breaks_off_before_answering_is_502_in_openai_shape(
    gateway: Gateway,
) -> None:
    client = gateway.client(gateway.bob)
    for model in ("close", "short"):  # no answer at all; half a body
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model=model, messages=[])
        assert caught.value.status_code == 502 and caught.value.code == "upstream_error"
        assert model in caught.value.message


def test_a_replica_that_says_nothing_is_504_after_the_read_timeout(gateway: Gateway) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        gateway.client(gateway.bob).chat.completions.create(model="mute", messages=[])
    assert caught.value.status_code == 504 and caught.value.code == "upstream_timeout"


def test_a_client_that_leaves_a_waiting_request_closes_its_replica_connection(
    gateway: Gateway,
) -> None:
    mute = gateway.scripted["mute"]
    closed = mute.closed_by_peer
    with pytest.raises(openai.APITimeoutError):
        gateway.client(gateway.bob, timeout=0.5).chat.completions.create(model="mute", messages=[])
    series = 'gpu_platform_gateway_requests_total{code="499",model="mute",tenant="team-b"}'

    def left() -> bool:  # a 499, not the 504 it would be had the gateway waited on
        return series in httpx.get(f"{gateway.server.url}/metrics", timeout=10).text

    assert wait_for(left, timeout=20)
    assert wait_for(lambda: mute.closed_by_peer > closed, timeout=20)


def test_a_key_past_its_token_rate_gets_429_with_retry_after(gateway: Gateway) -> None:
    key = _token(gateway.server, gateway.admin, "greedy", "team-a")
    client = gateway.client(key)
    # three minutes' worth in one answer: the key is in debt for about two minutes
    client.completions.create(model="tiny", prompt="x", max_tokens=3 * TOKENS_PER_MINUTE)
    with pytest.raises(openai.RateLimitError) as caught:
        client.completions.create(model="tiny", prompt="x", max_tokens=1)
    assert caught.value.code == "rate_limit_exceeded"
    assert int(caught.value.response.headers["retry-after"]) >= 1
    assert gateway.client(gateway.ann).completions.create(model="tiny", prompt="x", max_tokens=1)


def test_a_draining_replica_gets_no_new_requests(gateway: Gateway) -> None:
    gateway.routes.update_replica("tiny", "t1", draining=True)
    gateway.routes.update_replica("tiny", "t2", ready=False)
    gateway.publish()
    try:
        client = gateway.client(gateway.ann)
        served = {
            client.completions.create(model="tiny", prompt="x", max_tokens=1).system_fingerprint
            for _ in range(8)
        }
        assert served == {"t3"}
    finally:
        gateway.routes.update_replica("tiny", "t1", draining=False)
        gateway.routes.update_replica("tiny", "t2", ready=True)
        gateway.publish()


def test_one_session_keeps_its_replica_and_sessions_spread(gateway: Gateway) -> None:
    client = gateway.client(gateway.ann)

    def served(session: str) -> set[str | None]:
        return {
            client.completions.create(
                model="tiny", prompt="x", max_tokens=1, extra_headers={"X-Session-Id": session}
            ).system_fingerprint
            for _ in range(4)
        }

    per_session = [served(f"session-{i}") for i in range(8)]
    assert all(len(s) == 1 for s in per_session)
    assert len(set().union(*per_session)) > 1


def _serving(gateway: Gateway, key: str) -> dict[str, dict[str, int]]:
    auth = {"Authorization": f"Bearer {key}"}
    r = httpx.get(f"{gateway.server.url}/v1/usage", headers=auth, timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json()["serving_by_tenant"])


def test_usage_and_metrics_count_requests_and_tokens_per_tenant(gateway: Gateway) -> None:
    zero = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    before = _serving(gateway, gateway.bob).get("team-b", zero)
    bob = gateway.client(gateway.bob)
    bob.chat.completions.create(model="other", messages=[{"role": "user", "content": "a b"}])
    stream = bob.chat.completions.create(
        model="other", messages=[{"role": "user", "content": "c"}], max_tokens=3, stream=True
    )
    assert len(list(stream)) == 3
    with pytest.raises(openai.NotFoundError):
        bob.chat.completions.create(model="tiny", messages=[])
    after = _serving(gateway, gateway.bob)
    assert list(after) == ["team-b"]  # a user sees its own tenant only
    # the first answer reported 2 + 8 tokens; the stream (no usage asked for) counted 3 events
    assert {k: after["team-b"][k] - before[k] for k in zero} == {
        "requests": 2,
        "prompt_tokens": 2,
        "completion_tokens": 11,
    }
    table = gateway.server.cli("--token", gateway.bob, "usage")
    assert "COMPLETION TOKENS" in table.stdout and "team-b" in table.stdout
    metrics = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    assert (
        'gpu_platform_gateway_requests_total{code="200",model="other",tenant="team-b"}' in metrics
    )
    assert 'gpu_platform_gateway_requests_total{code="404",model="",tenant="team-b"}' in metrics
    assert 'gpu_platform_gateway_time_to_first_token_seconds_count{model="other"}' in metrics
    assert 'gpu_platform_gateway_tokens_total{kind="completion",model="other",tenant="team-b"}' in (
        metrics
    )


def test_a_client_that_leaves_mid_stream_is_counted_as_499_and_its_stream_closed(
    gateway: Gateway,
) -> None:
    auth = {"Authorization": f"Bearer {gateway.ann}"}
    body = {"model": "slow", "messages": [], "max_tokens": 200, "stream": True}  # 8 s
    with (
        httpx.Client(base_url=gateway.url, headers=auth, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert next(response.iter_lines()).startswith("data: ")
    series = 'gpu_platform_gateway_requests_total{code="499",model="slow",tenant="team-a"}'

    def counted() -> bool:
        return series in httpx.get(f"{gateway.server.url}/metrics", timeout=10).text

    assert wait_for(counted, timeout=20)  # had the stream run on, it would end as a 200


def test_killing_a_replica_mid_stream_fails_only_the_streams_on_it(gateway: Gateway) -> None:
    client = gateway.client(gateway.ann, timeout=30)
    first_chunk = threading.Barrier(5)
    results: dict[int, tuple[str, str | None]] = {}

    def stream(i: int) -> None:
        replica = "?"
        try:
            chunks = client.chat.completions.create(
                model="slow",
                messages=[{"role": "user", "content": f"stream {i}"}],
                max_tokens=40,
                stream=True,
            )
            text = ""
            for n, chunk in enumerate(chunks):
                replica = chunk.system_fingerprint or "?"
                text += chunk.choices[0].delta.content or ""
                if n == 0:
                    first_chunk.wait(timeout=20)
            results[i] = (replica, text)
        except (openai.APIError, httpx.HTTPError):
            results[i] = (replica, None)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    first_chunk.wait(timeout=20)  # every stream is under way, 2 on each replica
    gateway.replicas["s1"].kill()
    for t in threads:
        t.join(timeout=30)
    on_killed = {i for i, (replica, _) in results.items() if replica == "s1"}
    assert len(results) == 4 and on_killed  # least outstanding spread them over both
    for i, (replica, text) in results.items():
        if replica == "s1":
            assert text is None, f"stream {i} on the killed replica finished"
        else:
            assert text == "".join(completion_tokens(f"stream {i}", 40))
    # s1 is still listed as ready: its refused connections are retried on s2
    after = [
        client.chat.completions.create(model="slow", messages=[], max_tokens=1).system_fingerprint
        for _ in range(4)
    ]
    assert after == ["s2"] * 4
