"""One port, one process: gRPC's default SO_REUSEPORT is off for every server we build."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from gpu_platform.adapters.grpc_bind import NO_PORT_REUSE, PortUnavailable, bind_port


def test_a_port_held_by_a_default_grpc_server_is_refused_naming_it() -> None:
    holder = grpc.server(futures.ThreadPoolExecutor(1))  # gRPC's defaults: SO_REUSEPORT on
    port = holder.add_insecure_port("127.0.0.1:0")
    holder.start()
    second = grpc.server(futures.ThreadPoolExecutor(1), options=[NO_PORT_REUSE])
    try:
        with pytest.raises(PortUnavailable, match=rf"Raft cannot listen on 127.0.0.1:{port}:"):
            bind_port(second, f"127.0.0.1:{port}", "Raft")
    finally:
        holder.stop(None)
        second.stop(None)


def test_a_free_port_is_bound_and_returned() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(1), options=[NO_PORT_REUSE])
    try:
        assert bind_port(server, "127.0.0.1:0", "gRPC API") > 0
    finally:
        server.stop(None)
