"""Binding gRPC servers to their ports: one port, one process.

gRPC sets SO_REUSEPORT on its listening sockets by default, so a second process asking for a
port another gRPC server holds gets it too and the kernel splits connections between them
(two servers answering one Raft address). Every gRPC server here is built with
`NO_PORT_REUSE` among its options and binds through `bind_port`, which turns gRPC's failure
into a `PortUnavailable` naming the port.
"""

from __future__ import annotations

import grpc
import grpc.aio

__all__ = ["NO_PORT_REUSE", "PortUnavailable", "bind_port"]

NO_PORT_REUSE = ("grpc.so_reuseport", 0)


class PortUnavailable(OSError):
    """A server could not listen on its address (taken by another process, or not local)."""


def bind_port(
    server: grpc.Server | grpc.aio.Server,
    address: str,
    what: str,
    credentials: grpc.ServerCredentials | None = None,
) -> int:
    """Listen on `address` ("host:port"); the port bound. `what` names the server in errors."""
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError:  # grpcio >= 1.60 raises; older versions return 0
        port = 0
    if port == 0:
        raise PortUnavailable(
            f"{what} cannot listen on {address}: the port is in use or the address is not local"
        )
    return int(port)
