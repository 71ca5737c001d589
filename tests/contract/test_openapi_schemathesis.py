"""schemathesis against our own OpenAPI schema: no 5xx, and every response matches the schema
(status codes, problem+json error bodies, headers). The app is built through the real container
with in-memory fakes (no processes), authentication on, and an admin token on every request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from dependency_injector import providers
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryGpuDiscovery,
    InMemoryJobStore,
    ManualClock,
    SequentialJobIds,
)

HEADERS: dict[str, str] = {}


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    tmp: Path = tmp_path_factory.mktemp("schemathesis")
    container = Container(
        settings=Settings(
            server_id=0,  # the embedded core: these test the APIs over in-process fakes
            data_dir=tmp,
            grpc_port=-1,
            schedule_interval_seconds=0.05,
            auth="on",
            rate_limit_per_second=0,
        )
    )
    inventory = Inventory((default_node(),), source="sim", simulated=True)
    container.adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    container.adapters.store.override(providers.Object(InMemoryJobStore()))
    container.adapters.runner.override(providers.Object(FakeJobRunner()))
    container.adapters.clock.override(providers.Object(ManualClock()))
    container.adapters.ids.override(providers.Object(SequentialJobIds()))
    container.init_resources()
    issued = container.access().bootstrap()
    assert issued is not None
    HEADERS["Authorization"] = f"Bearer {issued.secret}"
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", container.rest_app())
    finally:
        container.shutdown_resources()


@pytest.mark.timeout(480)  # ~40 operations x 25 cases through the whole app
def test_the_api_never_fails_with_5xx_and_matches_its_schema(api_schema: object) -> None:
    # Driven by hand (not schemathesis' pytest plugin) so it works with any pytest version.
    checked = []
    cases = 0
    for result in api_schema.get_all_operations():  # type: ignore[attr-defined]
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def run(case: schemathesis.Case) -> None:
            nonlocal cases
            cases += 1
            # A schema-valid request may still be refused with 422 on purpose: more GPUs than
            # any node has can never be placed (issue 2), so that one check is left out.
            case.call_and_validate(headers=HEADERS, excluded_checks=[positive_data_acceptance])

        run()
        checked.append(operation.label)
    assert len(checked) >= 20, checked
    print(f"schemathesis: {len(checked)} operations, {cases} cases, no failures")
