"""What authentication costs a REST call: `api.request` (GET /v1/jobs/{id} through the real
app in-process, FastAPI TestClient) with auth off (the baseline) and on (token lookup in
SQLite by SHA-256, rate-limit bucket, tenant scoping); and `api.rate_limit.take`, one token
bucket decision."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from dependency_injector import providers
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import baseline, result, time_calls

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.ratelimit import TokenBucket
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryGpuDiscovery,
    InMemoryJobStore,
    SequentialJobIds,
)


def _request_latency(auth: str, n: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            server_id=0,  # the embedded core: these test the APIs over in-process fakes
            data_dir=Path(tmp),
            grpc_port=-1,
            auth=auth,
            rate_limit_per_second=0,
            log_level="error",
        )
        container = Container(settings=settings)
        inventory = Inventory((default_node(),), source="sim", simulated=True)
        container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
        container.adapters.store.override(providers.Object(InMemoryJobStore()))
        container.adapters.runner.override(providers.Object(FakeJobRunner()))
        container.adapters.ids.override(providers.Object(SequentialJobIds()))
        container.init_resources()
        try:
            issued = container.access().bootstrap()
            headers = {} if issued is None else {"Authorization": f"Bearer {issued.secret}"}
            job = container.jobs_api().submit(JobSpec(command=("fake-forever",)))
            with TestClient(container.rest_app()) as client:

                def call() -> None:
                    assert client.get(f"/v1/jobs/{job.id}", headers=headers).status_code == 200

                return time_calls(call, n, warmup=20)
        finally:
            container.shutdown_resources()


def run(quick: bool = False) -> list[dict[str, Any]]:
    n = 200 if quick else 3000
    off = result("api.request", {"api": "rest", "auth": "off"}, _request_latency("off", n))
    on = result(
        "api.request",
        {"api": "rest", "auth": "on"},
        _request_latency("on", n),
        baseline=baseline("api.request auth=off", off),
    )
    bucket = TokenBucket.full(rate=1e9, burst=1e9, now=0.0)
    clock = iter(range(10**9))
    take = result(
        "api.rate_limit.take",
        {"rate": 1e9},
        time_calls(lambda: bucket.take(float(next(clock))), 20000 if quick else 200000),
    )
    return [off, on, take]
