"""The composition root: the only place that names concrete adapters.

Containers are split by concern; `Container` joins them. Adapters are chosen by Settings.
Things with a lifecycle (the SQLite store, the process runner, the running control plane) are
`providers.Resource`s: `init_resources()` starts them, `shutdown_resources()` stops them in
reverse order. Tests build the app through this container and override adapters with fakes
from `gpu_platform.testing`.
"""

from __future__ import annotations

from collections.abc import Iterator

from dependency_injector import containers, providers
from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider

from gpu_platform.adapters.inbound.rest import create_app
from gpu_platform.adapters.outbound.observability import StructlogEventPublisher
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.adapters.outbound.sim import FileGpuDiscovery, SimulatedGpuDiscovery
from gpu_platform.adapters.outbound.storage import SqliteJobStore
from gpu_platform.adapters.outbound.system import SystemClock, UuidJobIds
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.events import DomainEvent
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import ConfigError, Settings
from gpu_platform.infrastructure.metrics import Metrics
from gpu_platform.infrastructure.tracing import configure_tracing
from gpu_platform.ports.outbound.events import EventPublisher
from gpu_platform.ports.outbound.gpu_discovery import GpuDiscovery
from gpu_platform.ports.outbound.job_runner import JobRunner
from gpu_platform.ports.outbound.job_store import JobStore

__all__ = ["Container", "FanoutPublisher"]


class FanoutPublisher:
    """Implements EventPublisher by handing each event to every subscriber in order."""

    def __init__(self, *subscribers: EventPublisher) -> None:
        self._subscribers = subscribers

    def publish(self, event: DomainEvent) -> None:
        for subscriber in self._subscribers:
            subscriber.publish(event)


def select_discovery(settings: Settings) -> GpuDiscovery:
    """auto: a real vendor adapter when one finds GPUs, else the simulated node (said loudly)."""
    if settings.inventory == "file":
        if settings.inventory_file is None:
            raise ConfigError("inventory=file needs inventory_file (GPU_PLATFORM_INVENTORY_FILE)")
        return FileGpuDiscovery(settings.inventory_file)
    if settings.inventory == "sim":
        return SimulatedGpuDiscovery(reason="inventory=sim was configured")
    return SimulatedGpuDiscovery(
        reason="no GPU found by any vendor adapter; using the simulated default node "
        "(8 x A100-SXM4-80GB, 2 NUMA nodes)"
    )


def _discover(discovery: GpuDiscovery) -> Inventory:
    return discovery.discover()


def _sqlite_store(settings: Settings) -> Iterator[JobStore]:
    store = SqliteJobStore(settings.data_dir / "state.db")
    yield store
    store.close()


def _process_runner(settings: Settings) -> Iterator[JobRunner]:
    runner = ProcessJobRunner(settings.data_dir / "jobs")
    yield runner
    runner.close(settings.stop_grace_seconds)


def _running_control_plane(
    settings: Settings,
    inventory: Inventory,
    store: JobStore,
    runner: JobRunner,
    clock: SystemClock,
    ids: UuidJobIds,
    publisher: EventPublisher,
) -> Iterator[ControlPlane]:
    plane = ControlPlane(
        inventory,
        store,
        runner,
        clock,
        ids,
        publisher,
        stop_grace_s=settings.stop_grace_seconds,
        shutdown_policy=settings.shutdown_policy,
        schedule_interval_s=settings.schedule_interval_seconds,
    )
    plane.start()
    yield plane
    plane.shutdown()


def _rest_app(plane: ControlPlane, metrics: Metrics, tracer: TracerProvider) -> FastAPI:
    metrics.watch(lambda: plane)
    return create_app(plane, metrics=metrics.render, tracer_provider=tracer)


class Observability(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    metrics = providers.Singleton(Metrics)
    log_events = providers.Singleton(StructlogEventPublisher)
    publisher = providers.Singleton(FanoutPublisher, log_events, metrics)
    tracer_provider = providers.Singleton(configure_tracing, settings.provided.otlp_endpoint)


class Adapters(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    clock = providers.Singleton(SystemClock)
    ids = providers.Singleton(UuidJobIds)
    discovery = providers.Singleton(select_discovery, settings)
    inventory = providers.Singleton(_discover, discovery)
    store = providers.Resource(_sqlite_store, settings)
    runner = providers.Resource(_process_runner, settings)


class Container(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    observability = providers.Container(Observability, settings=settings)
    adapters = providers.Container(Adapters, settings=settings)
    control_plane = providers.Resource(
        _running_control_plane,
        settings,
        adapters.inventory,
        adapters.store,
        adapters.runner,
        adapters.clock,
        adapters.ids,
        observability.publisher,
    )
    rest_app = providers.Singleton(
        _rest_app, control_plane, observability.metrics, observability.tracer_provider
    )
