"""`gpu-platform serve`: build the container, run the REST server, shut down cleanly.

uvicorn turns SIGINT/SIGTERM into a graceful exit of the HTTP server and then re-raises the
signal with the handler that was installed before it; ours only records it, so the process goes
on to `shutdown_resources()` (the shutdown policy for running jobs, see
application/control_plane.py; the store is closed) and exits 0.
"""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path
from typing import IO, Protocol

import structlog
import uvicorn

from gpu_platform.adapters.grpc_bind import PortUnavailable
from gpu_platform.adapters.outbound.cpu_affinity import FollowRole, pin_process
from gpu_platform.adapters.outbound.cpu_priority import raise_process_priority
from gpu_platform.adapters.outbound.gc_pauses import CollectionWatch, freeze_startup_heap
from gpu_platform.adapters.outbound.integrity import StorageError
from gpu_platform.adapters.outbound.process_memory import limit_malloc_arenas
from gpu_platform.adapters.outbound.storage import AuditChainBroken
from gpu_platform.adapters.outbound.topology_command import topology_command
from gpu_platform.application.access_replica import ReplicatedAccessStore
from gpu_platform.application.consistency import stale_reads
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.infrastructure.access_startup import ReplicatedAccessStartup, write_admin_token
from gpu_platform.infrastructure.bound_ports import (
    ReportingServer,
    bind_rest_port,
    forget_ports,
    report_ports,
    serve_ports,
)
from gpu_platform.infrastructure.config import ConfigError, Settings, load_settings
from gpu_platform.infrastructure.container import Container, tls_files
from gpu_platform.infrastructure.data_dir import harden_data_dir
from gpu_platform.infrastructure.listen_check import check_ports_free
from gpu_platform.infrastructure.logging import configure_logging
from gpu_platform.infrastructure.rest_http import BoundedHttpToolsProtocol
from gpu_platform.infrastructure.storage_check import check_storage
from gpu_platform.infrastructure.tracing import TracingError
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError

__all__ = [
    "DataDirLocked",
    "announce_access",
    "lock_data_dir",
    "serve",
    "serve_settings",
    "topology",
]

log = structlog.get_logger("gpu_platform.server")

# How long a one-voter `serve` waits to lead and for its own agent before it takes requests
# anyway (with peers it serves at once: a leader may need servers that are not up yet).
READY_TIMEOUT_S = 30.0


class _ServeOptions(Protocol):
    @property
    def host(self) -> str | None: ...
    @property
    def port(self) -> int | None: ...
    @property
    def data_dir(self) -> Path | None: ...
    @property
    def config(self) -> Path | None: ...


class DataDirLocked(Exception):
    """Another server already uses this data directory."""


def lock_data_dir(data_dir: Path) -> IO[str]:
    """Hold an exclusive lock on `data_dir/lock` for the life of the returned file; the
    directory is made private (0700, its files 0600: `harden_data_dir`)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    handle = (data_dir / "lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise DataDirLocked(
            f"data dir {data_dir} is in use by another server (pid {holder})"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    harden_data_dir(data_dir)  # secrets and state: unreadable to jobs (other accounts)
    return handle


def serve(options: _ServeOptions) -> None:
    """The `serve` hook of the CLI. Exits with a one-line reason on bad configuration."""
    try:
        settings = load_settings(
            options.config,
            host=options.host,
            port=options.port,
            data_dir=options.data_dir,
            server_id=getattr(options, "server_id", None),
            peers=getattr(options, "peers", None),
            grpc_port=getattr(options, "grpc_port", None),
            agent_port=getattr(options, "agent_port", None),
            local_agent=getattr(options, "local_agent", None),
            join=getattr(options, "join", None),
            raft_port=getattr(options, "raft_port", None),
            api_workers=getattr(options, "api_workers", None),
        )
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    configure_logging(settings.log_level, settings.log_format)
    try:
        serve_settings(settings)
    except (
        ConfigError,
        DiscoveryError,
        TracingError,
        DataDirLocked,
        AuditChainBroken,
        PortUnavailable,
        StorageError,
    ) as exc:
        raise SystemExit(f"error: {exc}") from None


def topology(node: str | None, xml: str | None, as_json: bool) -> str:
    """The `topology` hook of the CLI: this host's view (or an XML's), per the configuration."""
    settings = load_settings()
    configure_logging("error", settings.log_format)
    return topology_command(
        node,
        xml,
        as_json,
        preference=settings.inventory,
        sim_profile=settings.sim_profile,
        inventory_file=settings.inventory_file,
    )


def announce_access(settings: Settings, container: Container) -> Path | None:
    """Warn loudly when authentication is off; with it on, create the bootstrap admin token on
    first start, write it to <data_dir>/admin-token (0600) and print it once. Returns the
    file written, if any."""
    if settings.auth == "off":
        log.warning(
            "AUTHENTICATION IS OFF: every caller is an admin of tenant 'default'; "
            "set auth = on (GPU_PLATFORM_AUTH=on) on any shared or networked server"
        )
        return None
    if settings.server_id != 0:  # replicated: through the log, see start_replicated_access
        return None
    issued = container.access().bootstrap()
    if issued is None:
        log.info("authentication on", tokens="existing")
        return None
    return write_admin_token(settings, issued)


def start_replicated_access(
    settings: Settings, container: Container
) -> ReplicatedAccessStartup | None:
    """Replicated with auth on: bootstrap and import old tokens once a leader is known."""
    store = container.access_store()
    if settings.auth == "off" or not isinstance(store, ReplicatedAccessStore):
        return None
    legacy = container.adapters.access_store()
    return ReplicatedAccessStartup(settings, container.access(), store, legacy).start()


def _warn_embedded_jobs(container: Container) -> None:
    """Jobs in state.db come from the embedded mode (server_id = 0); a cluster's are in its
    Raft log. Say so rather than leave them behind silently."""
    old = container.adapters.store().load()
    if old:
        log.warning(
            "state.db holds jobs of the embedded mode (server_id = 0); they are not in this "
            "cluster's Raft log and will not run (serve with server_id = 0 to see them)",
            jobs=len(old),
        )


def _tune_process(settings: Settings) -> None:
    """Process-wide settings, made before the server's threads start (issue 21)."""
    limit_malloc_arenas(2)  # before the threads allocate (leader RSS)
    if settings.cpu_priority != "normal":  # threads started later inherit the nice value
        raise_process_priority()
    try:  # ... and the CPU mask
        pin_process(settings.cpu_affinity, settings.server_id)
    except ValueError as exc:  # a CPU this process may not use
        raise ConfigError(str(exc)) from None


def serve_settings(settings: Settings) -> None:
    _tune_process(settings)
    lock = lock_data_dir(settings.data_dir)
    try:
        check_ports_free(settings)
        check_storage(settings)
    except (PortUnavailable, StorageError):
        lock.close()
        raise
    settings, rest_socket = bind_rest_port(settings)  # port 0: any free one, bound now
    container = Container(settings=settings)
    tls = tls_files(settings)
    container.init_resources()
    plane = None
    access_startup = None
    role: FollowRole | None = None
    try:
        announce_access(settings, container)
        plane = container.control_plane()
        role = _follow_role(settings, plane)
        access_startup = start_replicated_access(settings, container)
        container.agent_server()
        container.local_agent()
        alone = not settings.peers.strip()  # with peers, a leader may need servers not up yet
        if alone and access_startup is not None and not access_startup.wait(READY_TIMEOUT_S):
            log.warning("authentication setup not finished; serving anyway")
        if alone and not plane.wait_ready(READY_TIMEOUT_S):
            log.warning(
                "no leader yet, or this host's agent has not registered; serving anyway",
                waited_s=READY_TIMEOUT_S,
            )
        with stale_reads():  # a follower's own view; it may not know the leader yet
            status = plane.status()
            if plane.replicated and not plane.list_jobs():
                _warn_embedded_jobs(container)
        if status.simulated:
            for note in status.notes:
                log.warning(note, inventory=status.inventory_source)
        log.info(
            "control plane ready",
            gpus=status.gpus_total,
            nodes=status.nodes,
            inventory=status.inventory_source,
            data_dir=str(settings.data_dir.resolve()),
        )
        config = uvicorn.Config(
            container.rest_app(),
            host=settings.host,
            port=settings.port,
            http=BoundedHttpToolsProtocol,  # httptools, with h11's bound on a head (issue 21)
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,  # open streams (log follow, dashboard events) end
            **(tls.uvicorn_options() if tls is not None else {}),  # type: ignore[arg-type]
        )
        received: list[int] = []
        freeze_startup_heap()  # short GC pauses: a long one stalls the Raft threads (issue 21)
        CollectionWatch().start()  # ... and a long one is logged
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, _frame: received.append(signum))
        ReportingServer(  # it writes <data_dir>/ports.json once REST accepts connections
            config, lambda: report_ports(settings.data_dir, serve_ports(settings, container))
        ).run(sockets=None if rest_socket is None else [rest_socket])
        if received:
            log.info("signal received", signal=signal.Signals(received[0]).name)
    finally:
        log.info("shutting down", policy=settings.shutdown_policy)
        _stop_serving(settings, container, plane, access_startup, role)
        lock.close()
        log.info("stopped")


def _stop_serving(
    settings: Settings,
    container: Container,
    plane: ControlPlane | None,
    access_startup: ReplicatedAccessStartup | None,
    role: FollowRole | None,
) -> None:
    if role is not None:
        role.stop()
    if access_startup is not None:
        access_startup.stop()
    if plane is not None:  # before the in-process agent goes: it settles that agent's jobs
        plane.shutdown()
    container.shutdown_resources()
    forget_ports(settings.data_dir)


def _follow_role(settings: Settings, plane: ControlPlane) -> FollowRole | None:
    """With `cpu_affinity = auto`, a replicated server's threads move to the leader's CPU
    while it leads, and any server's off a crowded CPU (adapters.outbound.cpu_affinity)."""
    if settings.cpu_affinity != "auto":
        return None
    if plane.replicated:
        role = FollowRole(settings.server_id, lambda: plane.acting)
    else:  # the embedded server always leads
        role = FollowRole(0, lambda: True)
    role.start()
    return role
