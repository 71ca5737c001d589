"""Services through a real replicated server and real agents (separate processes): the CLI
creates and describes a service, each replica listens at the address its agent reports, bad
input is refused naming the field, replicas spread over the nodes, and when a node's agent
dies its replica comes back on another node. The server's OpenAI-compatible gateway serves the service's model to the
official `openai` client, and a load generator running through it while the service is
scaled, loses a node and is rolled to a new spec sees no failure beyond the requests in
flight on a killed replica."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import openai
import pytest

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until

MODEL_SERVER = [sys.executable, "-m", "gpu_platform.testing.model_server", "--port-env", "PORT"]
FASTER = {  # a silent node is DOWN after 4 s
    "GPU_PLATFORM_NODE_SUSPECT_AFTER_SECONDS": "1",
    "GPU_PLATFORM_NODE_DOWN_AFTER_SECONDS": "4",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicatedCluster]:
    root: Path = tmp_path_factory.mktemp("services-cluster")
    c = ReplicatedCluster(root, servers=1, agents=2, profile="dgx-a100", env=FASTER).start()
    try:
        c.wait_ready(90)
        yield c
    finally:
        c.close()


class Load(threading.Thread):
    """Back-to-back chat completions through the gateway (one client, no client retries):
    what succeeded and what failed, with when."""

    def __init__(self, url: str, model: str) -> None:
        super().__init__(daemon=True)
        self.client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0, timeout=15)
        self.model = model
        self.ok = 0
        self.failed: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": "hi"}], max_tokens=2
                )
                self.ok += 1
            except openai.APIError as exc:
                self.failed.append(f"{time.monotonic():.2f} {type(exc).__name__}: {exc}")

    def __enter__(self) -> Load:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.halt.set()
        self.join(30)


def describe(c: ReplicatedCluster, name: str) -> dict[str, Any]:
    r = c.client.get(c.any_url() + f"/v1/services/{name}")
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return body


def all_ready(c: ReplicatedCluster, name: str, n: int) -> bool:
    s = describe(c, name)
    return s["ready"] == n and len(s["replica_set"]) == n


def test_the_cli_creates_a_service_whose_replicas_answer_at_their_reported_addresses(
    cluster: ReplicatedCluster,
) -> None:
    done = cluster.cli(
        "services", "create", "chat", "--replicas", "2", "--gpus", "1", "--model", "chat",
        "--backoff", "0.3", "--server", cluster.any_url(), "--", *MODEL_SERVER, "--model", "chat",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "service chat" in done.stdout
    assert wait_until(lambda: all_ready(cluster, "chat", 2), 60), describe(cluster, "chat")
    table = cluster.cli("services", "describe", "chat", "--server", cluster.any_url()).stdout
    assert "READY" in table and "node-" in table
    replica_set = describe(cluster, "chat")["replica_set"]
    for r in replica_set:
        assert r["node"].startswith("node-") and len(r["gpus"]) == 1
        reply = httpx.get(r["address"] + "/v1/models", timeout=5).json()
        assert reply["data"][0]["id"] == "chat"
    assert len({r["node"] for r in replica_set}) == 2  # spread: one replica on each node
    listed = cluster.cli("services", "list", "--server", cluster.any_url()).stdout
    assert "chat" in listed and "2/2" in listed


def test_the_gateway_serves_the_service_s_model_to_the_openai_client(
    cluster: ReplicatedCluster,
) -> None:
    client = openai.OpenAI(base_url=f"{cluster.any_url()}/v1", api_key="-", max_retries=0)
    assert "chat" in [m.id for m in client.models.list().data]
    answer = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "one two"}], max_tokens=3
    )
    replicas = {r["replica_id"] for r in describe(cluster, "chat")["replica_set"]}
    assert answer.usage is not None and answer.usage.completion_tokens == 3
    assert answer.choices[0].message.content
    chunks = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "x"}], max_tokens=4, stream=True
    )
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 4
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert len(replicas) == 2


def test_scaling_up_and_down_under_load_fails_no_request(cluster: ReplicatedCluster) -> None:
    url = cluster.any_url()
    with Load(url, "chat") as load:
        r = cluster.client.post(url + "/v1/services/chat/scale", json={"replicas": 3})
        assert r.status_code == 200, r.text
        assert wait_until(lambda: all_ready(cluster, "chat", 3), 60), describe(cluster, "chat")
        r = cluster.client.post(url + "/v1/services/chat/scale", json={"replicas": 2})
        assert r.status_code == 200, r.text
        assert wait_until(lambda: all_ready(cluster, "chat", 2), 60), describe(cluster, "chat")
        time.sleep(0.5)
    assert load.ok > 0 and load.failed == [], load.failed


def test_bad_input_is_refused_naming_the_field(cluster: ReplicatedCluster) -> None:
    r = cluster.client.post(
        cluster.any_url() + "/v1/services", json={"name": "x", "command": ["a"], "replicas": -1}
    )
    assert r.status_code == 422 and "replicas" in r.text
    r = cluster.client.post(
        cluster.any_url() + "/v1/services", json={"name": "y", "engine": "vllm", "gpus": 1}
    )
    assert r.status_code == 422 and "model" in r.text
    r = cluster.client.post(
        cluster.any_url() + "/v1/services", json={"name": "z", "command": ["a"], "gpus": 99}
    )
    assert r.status_code == 422 and "gpus" in r.text
    done = cluster.cli("services", "create", "Bad_Name", "--server", cluster.any_url(), "--", "a")
    assert done.returncode != 0 and "name" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = cluster.cli("services", "describe", "nope", "--server", cluster.any_url())
    assert done.returncode != 0 and "nope" in done.stderr


def test_the_grpc_serving_service_creates_describes_and_refuses_naming_the_field(
    cluster: ReplicatedCluster,
) -> None:
    lead = cluster.wait_leader()
    with grpc.insecure_channel(f"127.0.0.1:{cluster.grpc[lead]}") as channel:
        stub = pb_grpc.ServingServiceStub(channel)  # type: ignore[no-untyped-call]
        spec = pb.ServiceSpec(name="idle", command=["sleep", "600"], replicas=0)
        created = stub.CreateService(spec, timeout=10)
        assert created.spec.name == "idle" and created.spec.health_path == "/health"
        scaled = stub.ScaleService(pb.ServiceScaleRequest(name="idle", replicas=0), timeout=10)
        assert scaled.generation == 1
        names = [
            s.spec.name for s in stub.ListServices(pb.ServiceListRequest(), timeout=10).services
        ]
        assert "idle" in names and "chat" in names
        with pytest.raises(grpc.RpcError) as bad:
            stub.CreateService(pb.ServiceSpec(name="x", engine="tgi", command=["a"]), timeout=10)
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ("field", "engine") in tuple(bad.value.trailing_metadata() or ())
        with pytest.raises(grpc.RpcError) as missing:
            stub.GetService(pb.ServiceName(name="nope"), timeout=10)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as taken:
            stub.CreateService(spec, timeout=10)
        assert taken.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        stub.DeleteService(pb.ServiceName(name="idle"), timeout=10)


def test_when_a_nodes_agent_dies_its_replicas_come_back_on_another_node(
    cluster: ReplicatedCluster,
) -> None:
    before = describe(cluster, "chat")["replica_set"]
    lost = before[0]["node"]
    on_lost = {r["replica_id"] for r in before if r["node"] == lost}
    elsewhere_since: list[float] = []  # when a replica off the lost node was first seen ready

    def moved() -> bool:
        s = describe(cluster, "chat")
        off = [r for r in s["replica_set"] if r["node"] != lost and r["ready"]]
        if off and not elsewhere_since:
            elsewhere_since.append(time.monotonic())
        moved = [r for r in s["replica_set"] if r["replica_id"] in on_lost]
        return s["ready"] == 2 and all(r["node"] != lost for r in moved)

    with Load(cluster.any_url(), "chat") as load:
        cluster.signal_agent(lost, signal.SIGKILL)
        cluster.agents[lost].wait(timeout=30)
        assert wait_until(moved, 60), describe(cluster, "chat")
        served = load.ok
        assert wait_until(lambda: load.ok >= served + 5, 30), load.failed[-3:]  # serving again
    # Replicas are spread (one per node), so a replica was ready elsewhere all along: at most
    # the request in flight on the killed replica fails (one load client), and none once
    # routes are rebuilt (every 0.25 s).
    assert len(on_lost) == 1, before
    assert len(load.failed) <= len(on_lost), load.failed
    late = [f for f in load.failed if float(f.split()[0]) > elsewhere_since[0] + 1.0]
    assert late == [], (elsewhere_since, late)
    for r in describe(cluster, "chat")["replica_set"]:
        assert httpx.get(r["address"] + "/health", timeout=5).status_code == 200


def test_a_cli_update_rolls_out_keeping_a_replica_ready_then_delete_removes_it(
    cluster: ReplicatedCluster,
) -> None:
    ready: list[int] = []

    def rolled() -> bool:
        s = describe(cluster, "chat")
        ready.append(s["ready"])
        gens = {r["generation"] for r in s["replica_set"]}
        return s["generation"] == 2 and gens == {2} and s["ready"] == 2

    with Load(cluster.any_url(), "chat") as load:
        done = cluster.cli(
            "services", "update", "chat", "--env", "V=2", "--server", cluster.any_url()
        )
        assert done.returncode == 0, done.stderr
        assert wait_until(rolled, 60), describe(cluster, "chat")
        time.sleep(0.5)
    assert min(ready) >= 1
    assert load.ok > 0 and load.failed == [], load.failed
    spec = describe(cluster, "chat")["spec"]
    assert spec["env"] == {"V": "2"} and spec["model"] == "chat" and spec["backoff_s"] == 0.3
    done = cluster.cli("services", "delete", "chat", "--server", cluster.any_url())
    assert done.returncode == 0, done.stderr
    url = cluster.any_url() + "/v1/services/chat"
    assert wait_until(lambda: cluster.client.get(url).status_code == 404, 30)
