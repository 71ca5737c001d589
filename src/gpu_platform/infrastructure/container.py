"""The composition root: the only place that names concrete adapters.

Containers are split by concern; `Container` joins them. Adapters are chosen by Settings.
Things with a lifecycle (the SQLite store, the process runner, the running control plane) are
`providers.Resource`s: `init_resources()` starts them, `shutdown_resources()` stops them in
reverse order. Tests build the app through this container and override adapters with fakes
from `gpu_platform.testing`.
"""

from __future__ import annotations

from dependency_injector import containers, providers

from gpu_platform.adapters.outbound.observability import OtelJobTracer, StructlogEventPublisher
from gpu_platform.adapters.outbound.observability.event_hub import EventHub
from gpu_platform.adapters.outbound.system import SystemClock, UuidJobIds
from gpu_platform.application.auth_scope import AuditedHardwareStore, AuditTrail
from gpu_platform.application.gateway.ledger import ServingLedger
from gpu_platform.application.usage import UsageService
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.gateway import gateway_routes
from gpu_platform.infrastructure.metrics import Metrics
from gpu_platform.infrastructure.replicated import running_agent_server, running_replication
from gpu_platform.infrastructure.tracing import configure_tracing
from gpu_platform.infrastructure.wiring_control import (
    FanoutPublisher,
    FanoutSchedulerMetrics,
    _admission,
    _local_agent,
    _running_control_plane,
    _running_health,
    _running_services,
    fault_policy,
)
from gpu_platform.infrastructure.wiring_node import (
    HealthParts,
    _discover,
    _local_runner,
    _runner,
    job_isolation,
    select_discovery,
    select_health,
)
from gpu_platform.infrastructure.wiring_servers import (
    _gateway_server,
    _grpc_server,
    _rest_app,
    tls_files,
)
from gpu_platform.infrastructure.wiring_stores import (
    _access,
    _access_store,
    _audit_log,
    _run_as,
    _sqlite_access,
    _sqlite_hardware,
    _sqlite_quotas,
    _sqlite_run_as,
    _sqlite_store,
)

__all__ = [
    "Container",
    "FanoutPublisher",
    "FanoutSchedulerMetrics",
    "HealthParts",
    "fault_policy",
    "select_health",
    "tls_files",
]


class Observability(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    metrics = providers.Singleton(Metrics)
    tracer_provider = providers.Singleton(configure_tracing, settings.provided.otlp_endpoint)
    job_tracer = providers.Singleton(OtelJobTracer, tracer_provider)
    log_events = providers.Singleton(StructlogEventPublisher, job_tracer.provided.trace_id)
    event_hub = providers.Singleton(EventHub)
    # the tracer first: the log line of an event then carries the job's trace id
    publisher = providers.Singleton(FanoutPublisher, job_tracer, log_events, metrics, event_hub)


class Adapters(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    clock = providers.Singleton(SystemClock)
    ids = providers.Singleton(UuidJobIds)
    discovery = providers.Singleton(select_discovery, settings)
    inventory = providers.Singleton(_discover, discovery)
    store = providers.Resource(_sqlite_store, settings)
    isolation = providers.Singleton(job_isolation, settings)
    runner = providers.Resource(_runner, settings, isolation, inventory)
    # the in-process agent's runner (replicated with local_agent); built only when used
    local_runner = providers.Resource(_local_runner, settings, isolation, inventory)
    hardware = providers.Resource(_sqlite_hardware, settings)
    health_parts = providers.Singleton(select_health, settings, inventory, discovery)
    access_store = providers.Resource(_sqlite_access, settings)
    quota_store = providers.Resource(_sqlite_quotas, settings)
    run_as_store = providers.Resource(_sqlite_run_as, settings)
    audit_log = providers.Resource(_audit_log, settings)


class Container(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    observability = providers.Container(Observability, settings=settings)
    adapters = providers.Container(Adapters, settings=settings)
    # Operator actions recorded by the control plane also go to the hash-chained audit log.
    audited_hardware = providers.Singleton(
        AuditedHardwareStore, adapters.hardware, adapters.audit_log
    )
    tls = providers.Singleton(tls_files, settings)
    policy = providers.Singleton(fault_policy, settings)
    replication = providers.Resource(
        running_replication,
        settings,
        policy,
        tls,
        observability.metrics.provided.registry,
        audited_hardware.provided.append_audit,  # refused Raft senders
    )
    agent_server = providers.Resource(
        running_agent_server, settings, adapters.runner, tls, audited_hardware.provided.append_audit
    )
    control_plane = providers.Resource(
        _running_control_plane,
        settings,
        adapters.inventory,
        adapters.store,
        adapters.runner,
        adapters.clock,
        adapters.ids,
        observability.publisher,
        audited_hardware,
        adapters.health_parts,
        observability.metrics,
        observability.job_tracer,
        adapters.quota_store,
        replication,
        agent_server,  # first: the control plane announces the port it got
    )
    health = providers.Resource(_running_health, control_plane, adapters.health_parts)
    local_agent = providers.Resource(
        _local_agent,
        settings,
        adapters.inventory,
        adapters.health_parts,
        agent_server,
        tls,
        adapters.local_runner,
    )
    serving_ledger = providers.Singleton(ServingLedger)
    usage = providers.Singleton(UsageService, control_plane, adapters.clock, serving_ledger)
    audit_trail = providers.Singleton(AuditTrail, adapters.audit_log, adapters.clock)
    run_as = providers.Singleton(_run_as, settings, adapters.run_as_store, audit_trail, replication)
    jobs_api = providers.Singleton(_admission, settings, control_plane, run_as)
    # services with replicas; the gateway routes to their replicas (and a routes file's)
    services = providers.Resource(_running_services, control_plane, adapters.clock, adapters.runner)
    model_routes = providers.Singleton(gateway_routes, settings, services)
    # replicated: tenants and tokens are cluster state (state.db's are imported once)
    access_store = providers.Singleton(_access_store, adapters.access_store, replication)
    access = providers.Singleton(
        _access, settings, access_store, adapters.clock, adapters.audit_log
    )
    grpc_server = providers.Resource(
        _grpc_server,
        settings,
        control_plane,
        observability.event_hub,
        observability.tracer_provider,
        observability.metrics,
        jobs_api,
        access,
        audit_trail,
        run_as,
        services,
    )
    rest_app = providers.Singleton(
        _rest_app,
        settings,
        control_plane,
        observability.metrics,
        observability.tracer_provider,
        adapters.discovery,
        usage,
        jobs_api,
        access,
        audit_trail,
        observability.event_hub,
        run_as,
        model_routes,
        serving_ledger,
        services,
    )
    gateway_server = providers.Resource(  # with gateway_port: the gateway on its own port
        _gateway_server, settings, model_routes, access, observability.metrics, serving_ledger, tls
    )
