"""Before `serve` starts anything: every port it will listen on must be free.

A port another process holds fails the start with one line naming the port and what it is
for. The servers themselves bind without port reuse (`adapters.grpc_bind`), so a port taken
between this check and the bind fails too, only with a less tidy message.
"""

from __future__ import annotations

import socket

from gpu_platform.adapters.grpc_bind import PortUnavailable
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.replicated import voters

__all__ = ["check_ports_free", "listen_addresses"]


def listen_addresses(settings: Settings) -> list[tuple[str, str, int]]:
    """(what, host, port) of each fixed port `serve` will listen on (port 0 = any: skipped)."""
    wanted = [("REST API", settings.host, settings.port)]
    if settings.grpc_port > 0:
        wanted.append(("gRPC API", settings.host, settings.grpc_port))
    if settings.gateway == "on" and settings.gateway_port is not None:
        wanted.append(("gateway", settings.host, settings.gateway_port))
    if settings.server_id != 0:
        wanted.append(("agent API", settings.host, settings.agent_port))
        if settings.peers.strip():
            host, _, port = voters(settings)[settings.server_id].rpartition(":")
            wanted.append(("Raft", host.strip("[]"), int(port)))
        else:
            wanted.append(("Raft", settings.host, settings.raft_port))
    return [(what, host, port) for what, host, port in wanted if port > 0]


def check_ports_free(settings: Settings) -> None:
    """Raise PortUnavailable naming the first port that another process holds."""
    seen: dict[int, str] = {}
    for what, host, port in listen_addresses(settings):
        if port in seen:
            raise PortUnavailable(f"{what} and {seen[port]} are both set to port {port}")
        seen[port] = what
        _probe(what, host, port)


def _probe(what: str, host: str, port: int) -> None:
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise PortUnavailable(f"{what} cannot listen on {host}:{port}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
        try:
            probe.bind(address)
        except OSError as exc:
            reason = "in use by another process" if exc.errno == 98 else exc.strerror
            raise PortUnavailable(f"{what} port {port} on {host} is {reason}") from None
