"""`use_fakes`: a composition root (`Container`) over the in-memory fakes, ready to serve.

Tests that drive the real APIs in-process (REST app, gRPC server) without hardware, durable
stores or processes replace the same five adapters; this does it once, then builds the
container's resources.
"""

from __future__ import annotations

from dependency_injector import providers

from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.tenancy import Principal, Role
from gpu_platform.infrastructure.container import Container
from gpu_platform.ports.inbound.access import IssuedToken
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryGpuDiscovery,
    InMemoryJobStore,
    ManualClock,
    SequentialJobIds,
)

__all__ = ["admin_and_user", "use_fakes"]


def use_fakes(container: Container, inventory: Inventory) -> Container:
    """Discovery of `inventory`, an in-memory job store, a fake runner, a manual clock and
    sequential job ids in `container`; its resources initialised. Returns `container`."""
    adapters = container.adapters
    adapters.discovery.override(providers.Object(InMemoryGpuDiscovery(inventory)))
    adapters.store.override(providers.Object(InMemoryJobStore()))
    adapters.runner.override(providers.Object(FakeJobRunner()))
    adapters.clock.override(providers.Object(ManualClock()))
    adapters.ids.override(providers.Object(SequentialJobIds()))
    container.init_resources()
    return container


def admin_and_user(
    container: Container, tenant: str = "acme", user: str = "mallory"
) -> tuple[IssuedToken, IssuedToken]:
    """On a container with authentication on: the bootstrap admin token, and a user token
    `user` of a new tenant `tenant` (made by that admin)."""
    access = container.access()
    admin = access.bootstrap()
    assert admin is not None, "authentication is off, or an admin token exists already"
    boss = Principal("boss", "default", Role.ADMIN)
    access.create_tenant(boss, tenant)
    return admin, access.create_token(boss, user, tenant, Role.USER)
