"""Services on the embedded core, in this process: real replica processes (the OpenAI-
compatible test model server), real ports and HTTP health checks, the real controller, and
the gateway's view of them (`container.model_routes()`)."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from gpu_platform.application.services import ServiceManager
from gpu_platform.domain.services.model import ServiceSpec
from gpu_platform.infrastructure.config import load_settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.ports.inbound.services import ServiceInfo
from gpu_platform.testing.fake_mps_control import write_fake_mps_control

MODEL_SERVER = (sys.executable, "-m", "gpu_platform.testing.model_server", "--port-env", "PORT")


def wait(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.fixture(scope="module")
def container() -> Iterator[Container]:
    with tempfile.TemporaryDirectory() as data:
        settings = load_settings(
            data_dir=data,
            server_id=0,
            grpc_port=-1,
            inventory="sim",
            sim_profile="dgx-a100",
            isolation="none",
            stop_grace_seconds=2,
            mps_control=str(write_fake_mps_control(Path(data))),  # shares of a GPU join it
        )
        container = Container(settings=settings)
        container.init_resources()
        try:
            yield container
        finally:
            container.shutdown_resources()


@pytest.fixture(scope="module")
def services(container: Container) -> ServiceManager:
    return container.services()


def spec(name: str, replicas: int, **kw: object) -> ServiceSpec:
    command = (*MODEL_SERVER, "--model", name)
    base = ServiceSpec(name, command, replicas=replicas, gpus=1, backoff_s=0.3, drain_s=0.2)
    return ServiceSpec(**{**{f: getattr(base, f) for f in base.__slots__}, **kw})  # type: ignore[arg-type]


def ready(services: ServiceManager, name: str, n: int) -> Callable[[], bool]:
    def check() -> bool:
        info = services.get_service(name)
        live = [r for r in info.replicas if not r.draining]
        return info.ready == n and len(live) == n

    return check


def replica_pid(address: str) -> int:
    r = httpx.get(address + "/v1/models", timeout=5)
    return int(r.headers["X-Replica-Id"].removeprefix("pid-"))


def test_replicas_become_ready_at_their_own_addresses_and_the_gateway_sees_them(
    services: ServiceManager,
) -> None:
    services.create_service(spec("tiny", 2))
    assert wait(ready(services, "tiny", 2)), services.get_service("tiny")
    info = services.get_service("tiny")
    addresses = {r.address for r in info.replicas}
    assert len(addresses) == 2
    assert len({(r.node, r.gpus) for r in info.replicas}) == 2  # each its own GPU
    assert all(len(r.gpus) == 1 and r.node for r in info.replicas)
    for address in addresses:
        models = httpx.get(address + "/v1/models", timeout=5).json()
        assert models["data"][0]["id"] == "tiny"
    assert wait(lambda: sum(r.ready for r in services.routes()["tiny"].replicas) == 2)
    route = services.routes()["tiny"]
    assert route.service == "tiny" and route.tenant == "default"
    assert {r.url for r in route.replicas} == addresses


def test_half_gpu_replicas_run_as_shares_of_one_gpu_and_serve(
    container: Container, services: ServiceManager
) -> None:
    services.create_service(spec("half", 2, gpu_milli=500))
    assert wait(ready(services, "half", 2)), services.get_service("half")
    plane = container.control_plane()
    for replica in services.get_service("half").replicas:
        job = plane.read_state(lambda s, j=replica.job_id: s.job(j))
        assert (job.spec.gpus, job.spec.gpu_milli) == (1, 500)
        assert len(replica.gpus) == 1
        assert httpx.get(replica.address + "/health", timeout=5).status_code == 200
    services.delete_service("half")
    assert wait(lambda: "half" not in services.routes())


def test_a_killed_replica_restarts_after_its_backoff_and_serves_again(
    services: ServiceManager,
) -> None:
    before = services.get_service("tiny")
    victim = before.replicas[0]
    os.kill(replica_pid(victim.address), signal.SIGKILL)

    def restarted() -> bool:
        r = next(
            x for x in services.get_service("tiny").replicas if x.replica_id == victim.replica_id
        )
        return r.restarts == 1 and r.state == "READY"

    assert wait(restarted), services.get_service("tiny")
    again = next(
        r for r in services.get_service("tiny").replicas if r.replica_id == victim.replica_id
    )
    assert again.job_id != victim.job_id
    assert httpx.get(again.address + "/health", timeout=5).status_code == 200


def test_scaling_up_adds_ready_replicas_and_scaling_down_drains_them(
    services: ServiceManager,
) -> None:
    services.scale_service("tiny", 3)
    assert wait(ready(services, "tiny", 3))
    services.scale_service("tiny", 1)
    assert wait(lambda: len(services.get_service("tiny").replicas) == 1)
    assert wait(lambda: len(services.routes()["tiny"].replicas) == 1)


def test_a_rolling_update_keeps_at_least_n_minus_1_replicas_ready_throughout(
    services: ServiceManager,
) -> None:
    services.scale_service("tiny", 2)
    assert wait(ready(services, "tiny", 2))
    seen: list[ServiceInfo] = []
    services.update_service(spec("tiny", 2, env=(("VERSION", "2"),)))

    def done() -> bool:
        info = services.get_service("tiny")
        seen.append(info)
        return (
            info.generation == 2
            and all(r.generation == 2 and r.state == "READY" for r in info.replicas)
            and len(info.replicas) == 2
        )

    assert wait(done, timeout=40)
    assert min(s.ready for s in seen) >= 1  # N-1
    assert any(r.draining for s in seen for r in s.replicas)  # old ones were drained first


def test_a_replica_that_never_becomes_healthy_says_why_and_restarts_no_faster_than_backoff(
    services: ServiceManager,
) -> None:
    services.create_service(
        spec(
            "sick", 1, health_path="/nope", startup_timeout_s=0.5, backoff_s=0.5, max_backoff_s=4.0
        )
    )
    whys: set[str] = set()
    restart_at: list[float] = []

    def watch() -> bool:
        replicas = services.get_service("sick").replicas
        if not replicas:
            return False
        (r,) = replicas
        whys.add(r.detail)
        if r.state == "BACKOFF" and (not restart_at or restart_at[-1] != r.not_before):
            restart_at.append(r.not_before)
        return r.restarts >= 2

    assert wait(watch, timeout=30)
    assert any(w.startswith("GET /nope: ") for w in whys), whys  # refused, then HTTP 404
    assert any("not ready 0.5s after start" in w for w in whys), whys
    gaps = [b - a for a, b in itertools.pairwise(restart_at)]
    assert all(g >= 0.5 for g in gaps), gaps  # each cycle: startup timeout + a growing backoff
    services.delete_service("sick")


def test_deleting_a_service_stops_its_replicas_and_removes_its_route(
    services: ServiceManager,
) -> None:
    address = services.get_service("tiny").replicas[0].address
    services.delete_service("tiny")
    assert wait(lambda: "tiny" not in services.routes())
    assert wait(lambda: not any(s.spec.name == "tiny" for s in services.list_services()))

    def closed() -> bool:
        try:
            httpx.get(address + "/health", timeout=1)
        except httpx.HTTPError:
            return True
        return False

    assert wait(closed)
