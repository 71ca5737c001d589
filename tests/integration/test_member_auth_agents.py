"""Only members of this cluster register agents (issue 20, item 3), over real gRPC on loopback
(and over the framed TCP streams, `agent_transport = tcp`: the same gate).

A rogue agent without the token (impersonating a real node, or inventing one) never registers,
never receives a job or its secret environment, and is audited. A second agent process that
claims a node while the node's agent is live is refused and audited; once the first is gone the
node may be taken again. With mutual TLS only an `agent` certificate naming the node of the
hello is admitted: a server's, a CLI user's, another node's, or one binding no member are
refused (and audited).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator

import grpc
import pytest

from gpu_platform.adapters.agent_wire.codec import node_to_json
from gpu_platform.adapters.agent_wire.framed import MAGIC, MESSAGE, frame, parse_trailer
from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb
from gpu_platform.adapters.agent_wire.v1 import agent_pb2_grpc as pb_grpc
from gpu_platform.adapters.cluster_identity import TOKEN_METADATA
from gpu_platform.adapters.inbound.agent_client import AgentClient
from gpu_platform.adapters.inbound.agent_tcp_server import AGENT_ALPN, AgentTcpServer
from gpu_platform.adapters.inbound.grpc.agent_service import AgentGrpcServer
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.adapters.tcp_security import client_context
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.model.node import Node
from gpu_platform.ports.outbound.job_runner import LaunchSpec
from gpu_platform.testing.agent_fakes import AcceptingListener
from gpu_platform.testing.fakes import FakeJobRunner
from gpu_platform.testing.member_pki import MemberPki
from tests.integration.conftest import wait_for

TOKEN = "gpc_members_only_agents_01"
SECRET = ("WANDB_API_KEY", "wandb-victim-secret")


def _node(name: str) -> Node:
    return default_node(name)


class Site:
    """An agents' server (real gRPC, or framed TCP) over a hub whose control plane accepts
    every agent."""

    def __init__(
        self, tls: TlsFiles | None = None, heartbeat_s: float = 2.0, transport: str = "grpc"
    ) -> None:
        self.audit: list[AuditRecord] = []
        self.listener = AcceptingListener()
        self.hub = AgentHub()
        self.hub.attach(self.listener)
        self.transport = transport
        kind = AgentTcpServer if transport == "tcp" else AgentGrpcServer
        self.server = kind(
            self.hub,
            "127.0.0.1",
            0,
            heartbeat_s=heartbeat_s,
            token=TOKEN,
            tls=tls,
            audit=self.audit.append,
        )
        self.server.start()
        self.address = f"127.0.0.1:{self.server.port}"
        self._clients: list[tuple[AgentClient, Agent]] = []

    def agent(
        self, node: str, token: str | None, tls: TlsFiles | None = None
    ) -> tuple[AgentClient, FakeJobRunner]:
        runner = FakeJobRunner()
        agent = Agent(_node(node), runner)
        client = AgentClient(
            agent,
            [self.address],
            token=token,
            backoff_initial_s=0.05,
            backoff_max_s=0.2,
            transport=self.transport,
            tls=None if tls is None else client_context(tls, AGENT_ALPN),
        )
        agent.start()
        client.start()
        self._clients.append((client, agent))
        return client, runner

    def launch(self, node: str) -> LaunchSpec:
        spec = LaunchSpec("victim-job", 1, 1, ("fake-forever",), (SECRET,), (), (), node=node)
        self.hub.start(spec, lambda _: None)
        return spec

    def refusals(self) -> list[AuditRecord]:
        return [a for a in self.audit if a.action == "agent.connect"]

    def close(self) -> None:
        for client, agent in self._clients:
            client.stop()
            agent.stop(0.1)
        self.server.stop(0.1)


@pytest.fixture(params=["grpc", "tcp"])
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    s = Site(transport=request.param)
    yield s
    s.close()


def test_a_rogue_agent_without_the_token_never_registers_nor_receives_a_job_or_its_env(
    site: Site,
) -> None:
    _, real = site.agent("node-a", TOKEN)
    assert wait_for(lambda: "node-a" in site.hub.ready_nodes())
    _, impostor = site.agent("node-a", None)  # the same node, no token
    _, stranger = site.agent("node-z", "gpc_some_other_cluster_01")  # an invented node
    assert wait_for(lambda: site.server.gate.refused >= 2)

    spec = site.launch("node-a")

    assert real.started == [spec] and SECRET in real.started[0].env
    assert impostor.started == [] and stranger.started == []
    assert [n.name for n in site.listener.nodes] == ["node-a"]
    assert "node-z" not in site.hub.ready_nodes()
    outcomes = {(a.actor, a.outcome.split(";")[0]) for a in site.refusals()}
    assert outcomes == {
        ("agent node-a", "refused: it presents no cluster token"),
        ("agent node-z", "refused: it presents another cluster's token"),
    }


def test_a_second_agent_process_claiming_a_live_node_is_refused_and_audited(site: Site) -> None:
    first, real = site.agent("node-a", TOKEN)
    assert wait_for(lambda: "node-a" in site.hub.ready_nodes())
    _, replay = site.agent("node-a", TOKEN)  # holds the token, but is another agent process
    assert wait_for(lambda: site.server.gate.refused >= 1)

    spec = site.launch("node-a")

    assert real.started == [spec] and replay.started == []
    assert len(site.listener.nodes) == 1
    (refusal,) = {(a.actor, a.outcome) for a in site.refusals()}
    assert refusal[0] == "agent node-a"
    assert refusal[1].startswith("refused: node node-a is connected from another agent")

    first.stop()  # the first agent is gone: the node is free to be claimed again
    assert wait_for(lambda: len(site.listener.nodes) == 2)


class RawAgent:
    """One agent stream opened by hand: a hello (with `instance`), kept open until `close`."""

    def __init__(
        self,
        address: str,
        node: str,
        tls: TlsFiles | None,
        instance: str = "raw",
        token: str = TOKEN,
    ) -> None:
        self._done = threading.Event()
        self.details = ""
        self._channel = (
            grpc.insecure_channel(address)
            if tls is None
            else grpc.secure_channel(address, tls.grpc_channel_credentials())
        )
        hello = pb.Hello(
            node=node, node_json=node_to_json(_node(node)), version="1", instance=instance
        )

        def requests() -> Iterator[pb.AgentMessage]:
            yield pb.AgentMessage(hello=hello)
            self._done.wait()

        stub = pb_grpc.AgentServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._call = stub.Connect(requests(), metadata=((TOKEN_METADATA, token),), timeout=20)

    def answer(self) -> grpc.StatusCode:
        """OK once the server welcomes the agent, else the refusal's code."""
        try:
            first = next(self._call)
        except grpc.RpcError as exc:
            self.details = exc.details() or ""
            return exc.code()  # type: ignore[no-any-return]
        assert first.WhichOneof("kind") == "welcome"
        return grpc.StatusCode.OK

    def close(self) -> None:
        self._done.set()
        self._call.cancel()
        self._channel.close()


class RawFramedAgent:
    """`RawAgent` on the framed TCP transport (`agent_transport = tcp`): MAGIC, the token, a
    hello; the answer is the welcome (OK) or the trailer's code and details."""

    def __init__(self, address: str, node: str, tls: TlsFiles | None, token: str = TOKEN) -> None:
        host, _, port = address.rpartition(":")
        raw = socket.create_connection((host, int(port)), timeout=20)
        context = None if tls is None else client_context(tls, AGENT_ALPN)
        self._sock = raw if context is None else context.wrap_socket(raw, server_hostname=host)
        self.details = ""
        hello = pb.Hello(
            node=node, node_json=node_to_json(_node(node)), version="1", instance="raw"
        )
        opening = json.dumps({"token": token}).encode()
        message = pb.AgentMessage(hello=hello).SerializeToString()
        self._sock.sendall(MAGIC + frame(opening) + frame(message))

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def answer(self) -> grpc.StatusCode:
        assert self._read(len(MAGIC)) == MAGIC
        (length,) = struct.unpack(">I", self._read(4))
        payload = self._read(length)
        if payload[:1] == bytes([MESSAGE]):
            assert pb.ServerMessage.FromString(payload[1:]).WhichOneof("kind") == "welcome"
            return grpc.StatusCode.OK
        trailer = parse_trailer(payload[1:])
        self.details = trailer.details
        return grpc.StatusCode[trailer.code]

    def close(self) -> None:
        self._sock.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> MemberPki:
    return MemberPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls_site(pki: MemberPki) -> Iterator[Site]:
    s = Site(tls=pki.tls("server", "1"))
    yield s
    s.close()


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        (("agent", "node-a"), grpc.StatusCode.OK),
        (("server", "1"), grpc.StatusCode.PERMISSION_DENIED),
        (("client", "alice"), grpc.StatusCode.PERMISSION_DENIED),
        (("agent", "node-b"), grpc.StatusCode.PERMISSION_DENIED),
        (("plain", "node-a"), grpc.StatusCode.PERMISSION_DENIED),
    ],
    ids=["its-own-agent-cert", "server-cert", "cli-user-cert", "other-nodes-cert", "no-member"],
)
def test_with_mtls_only_an_agent_certificate_naming_the_node_registers_it(
    pki: MemberPki, mtls_site: Site, who: tuple[str, str], expected: grpc.StatusCode
) -> None:
    role, name = who
    tls = pki.plain(name) if role == "plain" else pki.tls(role, name)
    before = len(mtls_site.refusals())
    agent = RawAgent(mtls_site.address, "node-a", tls, instance=f"{role}-{name}")
    try:
        assert agent.answer() is expected
    finally:
        agent.close()
    refusals = mtls_site.refusals()
    if expected is grpc.StatusCode.OK:
        assert len(refusals) == before
    else:
        assert len(refusals) == before + 1 and refusals[-1].actor.startswith("agent node-a")
        assert refusals[-1].outcome.startswith("refused: its certificate")


def test_with_mtls_a_reconnect_of_the_same_agent_replaces_its_stream_and_another_is_refused(
    pki: MemberPki, mtls_site: Site
) -> None:
    tls = pki.tls("agent", "node-r")
    opened: list[RawAgent] = []

    def hello(instance: str) -> grpc.StatusCode:
        opened.append(RawAgent(mtls_site.address, "node-r", tls, instance=instance))
        return opened[-1].answer()

    try:
        assert hello("one") is grpc.StatusCode.OK
        assert hello("one") is grpc.StatusCode.OK  # the same agent process reconnecting
        assert hello("two") is grpc.StatusCode.PERMISSION_DENIED  # same certificate, not it
    finally:
        for a in opened:
            a.close()


def test_a_node_whose_agent_fell_silent_may_be_claimed_by_a_new_agent_process() -> None:
    site = Site(heartbeat_s=0.05)  # silent: nothing heard for three heartbeat intervals
    opened: list[RawAgent] = []

    def hello(instance: str) -> grpc.StatusCode:
        opened.append(RawAgent(site.address, "node-s", None, instance=instance))
        return opened[-1].answer()

    try:
        assert hello("vanished-host") is grpc.StatusCode.OK  # then never heartbeats
        assert wait_for(lambda: hello("rebooted-host") is grpc.StatusCode.OK)
    finally:
        for a in opened:
            a.close()
        site.close()


@pytest.fixture(scope="module")
def mtls_tcp_site(pki: MemberPki) -> Iterator[Site]:
    s = Site(tls=pki.tls("server", "1"), transport="tcp")
    yield s
    s.close()


@pytest.mark.parametrize(
    ("who", "admitted"),
    [
        (("agent", "node-t"), True),
        (("server", "1"), False),
        (("client", "alice"), False),
        (("agent", "node-u"), False),
        (("plain", "node-t"), False),
    ],
    ids=["its-own-agent-cert", "server-cert", "cli-user-cert", "other-nodes-cert", "no-member"],
)
def test_over_tcp_with_mtls_only_an_agent_certificate_naming_the_node_registers_it(
    pki: MemberPki, mtls_tcp_site: Site, who: tuple[str, str], admitted: bool
) -> None:
    """The framed transport's gate is the gRPC one: the agent (a real `AgentClient` over
    TLS) registers with its own certificate; with any other it is refused and audited."""
    role, name = who
    tls = pki.plain(name) if role == "plain" else pki.tls(role, name)
    site = mtls_tcp_site
    before = len(site.refusals())
    client, _ = site.agent("node-t", TOKEN, tls=tls)
    try:
        if admitted:
            assert wait_for(lambda: "node-t" in site.hub.ready_nodes())
            assert len(site.refusals()) == before
        else:
            assert wait_for(lambda: len(site.refusals()) > before)
            refusal = site.refusals()[before]
            assert refusal.actor.startswith("agent node-t")
            assert refusal.outcome.startswith("refused: its certificate")
            assert client.streams == 0
    finally:
        client.stop()
        assert wait_for(lambda: "node-t" not in site.hub.ready_nodes())
