"""`agent_transport` set differently on an agent and its server: nothing registers, and the
server names the cause (a gRPC agent on the framed port); a framed agent on a gRPC port keeps
dialling without ever connecting. Real servers and clients on loopback."""

from __future__ import annotations

import socket
import time

import pytest
from structlog.testing import capture_logs

from gpu_platform.adapters.agent_wire.framed import MAGIC
from gpu_platform.adapters.inbound.agent_client import AgentClient
from gpu_platform.adapters.inbound.agent_tcp_server import AgentTcpServer
from gpu_platform.adapters.inbound.grpc.agent_service import AgentGrpcServer
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.testing.agent_fakes import AcceptingListener
from gpu_platform.testing.fakes import FakeJobRunner


def _hub() -> AgentHub:
    hub = AgentHub()
    hub.attach(AcceptingListener())
    return hub


@pytest.mark.parametrize(("server_kind", "client_transport"), [("tcp", "grpc"), ("grpc", "tcp")])
def test_an_agent_on_the_other_transport_never_registers(
    server_kind: str, client_transport: str
) -> None:
    hub = _hub()
    kind = AgentTcpServer if server_kind == "tcp" else AgentGrpcServer
    server = kind(hub, "127.0.0.1", 0, heartbeat_s=0.1)
    server.start()
    client = AgentClient(
        Agent(default_node("node-m"), FakeJobRunner()),
        [f"127.0.0.1:{server.port}"],
        backoff_max_s=0.1,
        transport=client_transport,
    )
    try:
        with capture_logs() as logs:
            client.start()
            time.sleep(1.5)  # several dials
        assert client.streams == 0 and hub.ready_nodes() == set()
        if server_kind == "tcp":  # the framed server saw gRPC's preface and says so
            why = [e.get("why", "") for e in logs if e["event"] == "agent connection refused"]
            assert why and "a gRPC agent dialled the framed agent port" in why[0]
    finally:
        client.stop()
        server.stop(0.1)


def test_the_framed_port_drops_a_connection_that_does_not_open_with_its_magic() -> None:
    server = AgentTcpServer(_hub(), "127.0.0.1", 0)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(64) == b""  # closed, nothing said
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(MAGIC + b"\x00\x00\x00\x02{}")
            assert sock.recv(len(MAGIC)) == MAGIC  # an opening frame: the conversation starts
    finally:
        server.stop(0.1)
