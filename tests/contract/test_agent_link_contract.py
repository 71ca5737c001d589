"""One suite for the agent's three links to a server's `AgentHub`: the gRPC stream
(`AgentClient` to `AgentGrpcServer` on loopback), the framed TCP stream (`AgentClient` with
`transport="tcp"` to `AgentTcpServer`: `agent_transport = tcp`) and the in-process link the
default server's own agent uses (`AgentClient` with a `LocalAgentLink`). Real hubs, agents,
clients and servers; the node's runner is the in-memory `FakeJobRunner`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

import pytest

from gpu_platform.adapters.inbound.agent_client import AgentClient
from gpu_platform.adapters.inbound.agent_tcp_server import AgentTcpServer
from gpu_platform.adapters.inbound.grpc.agent_service import AgentGrpcServer
from gpu_platform.adapters.inbound.local_agent_link import LocalAgentLink
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchSpec
from gpu_platform.testing.agent_fakes import AcceptingListener
from gpu_platform.testing.fakes import FakeJobRunner

HEARTBEAT_S = 0.1
LEASE_S = 30.0


class _Listener(AcceptingListener):
    """Accepts agents while `leader` is None, else names it; counts heartbeats."""

    def __init__(self) -> None:
        super().__init__()
        self.leader: str | None = None
        self.beats = 0

    def accepting(self) -> str | None:
        return self.leader

    def agent_heartbeat(self, node: str) -> None:
        self.beats += 1


@dataclass
class _Lease:
    renewals: list[float] = field(default_factory=list)

    def renew(self, until_monotonic: float) -> None:
        self.renewals.append(until_monotonic)


@dataclass
class _Server:
    hub: AgentHub
    listener: _Listener
    grpc: AgentGrpcServer | AgentTcpServer  # the servers' agent API, on the rig's transport

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc.port}"


@dataclass
class Rig:
    link: str
    target: str  # the agent's own server, as its client names it
    servers: list[_Server]
    agent: Agent
    runner: FakeJobRunner
    lease: _Lease
    client: AgentClient
    transport: str  # the servers' (gRPC for the in-process link's other server)


def _wait(cond: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def _spec(job_id: str, node: str, argv: tuple[str, ...] = ("fake-forever",)) -> LaunchSpec:
    return LaunchSpec(job_id, 1, 1, argv, (), (), (), node=node)


@pytest.fixture(params=["grpc", "tcp", "in-process"])
def rig(request: pytest.FixtureRequest, inventory: Inventory) -> Iterator[Rig]:
    """Two servers (a hub each, served over gRPC, or framed TCP for the tcp link); the agent's
    own server is the first, over the link under test."""
    servers = []
    transport = "tcp" if request.param == "tcp" else "grpc"
    kind = AgentTcpServer if transport == "tcp" else AgentGrpcServer
    for _ in range(2):
        hub, listener = AgentHub(), _Listener()
        hub.attach(listener)
        grpc_server = kind(hub, "127.0.0.1", 0, heartbeat_s=HEARTBEAT_S, lease_s=LEASE_S)
        grpc_server.start()
        servers.append(_Server(hub, listener, grpc_server))
    runner, lease = FakeJobRunner(), _Lease()
    agent = Agent(inventory.nodes[0], runner, lease=lease)
    own = servers[0]
    local, target = None, own.address
    if request.param == "in-process":  # an address no gRPC call could reach: the link's own
        target = "in-process"
        local = LocalAgentLink(
            own.hub, target, heartbeat_s=HEARTBEAT_S, lease_s=LEASE_S, claims=own.grpc
        )
    client = AgentClient(agent, [target], backoff_max_s=0.2, local=local, transport=transport)
    client.start()
    try:
        yield Rig(request.param, target, servers, agent, runner, lease, client, transport)
    finally:
        client.stop()
        for server in servers:
            server.grpc.stop(grace_s=0.1)


def _connected(rig: Rig, server: _Server) -> None:
    node = rig.agent.node.name
    _wait(lambda: node in server.hub.ready_nodes() and rig.client.connected_to != "")


def test_the_agent_connects_its_node_is_ready_and_heartbeats_renew_its_lease(rig: Rig) -> None:
    own = rig.servers[0]
    _connected(rig, own)
    assert [n.name for n in own.listener.nodes] == [rig.agent.node.name]
    assert rig.client.connected_to == rig.target and rig.client.streams == 1
    _wait(lambda: own.listener.beats >= 2 and len(rig.lease.renewals) >= 2)
    assert rig.lease.renewals[-1] > time.monotonic() + LEASE_S / 2


def test_a_launch_runs_on_the_agent_and_its_exit_is_delivered_and_acknowledged(
    rig: Rig,
) -> None:
    own = rig.servers[0]
    _connected(rig, own)
    node = rig.agent.node.name
    exits: list[ExitReport] = []
    errors = own.hub.start_all(
        [_spec("j1", node, ("fake-exit", "3")), _spec("j2", node)], exits.append
    )
    assert errors == [None, None]
    assert sorted(s.job_id for s in rig.runner.live()) == ["j1", "j2"]
    assert rig.runner.deliver() == 1
    _wait(lambda: len(exits) == 1)
    assert (exits[0].job_id, exits[0].exit_code) == ("j1", 3)
    _wait(lambda: rig.agent.unacked() == 0)
    assert rig.agent.running() == 1


def test_a_launch_the_runner_refuses_comes_back_as_the_launch_error(rig: Rig) -> None:
    own = rig.servers[0]
    _connected(rig, own)
    (error,) = own.hub.start_all([_spec("bad", rig.agent.node.name, ("nope",))], lambda r: None)
    assert error is not None and "'nope'" in str(error)


def test_a_stop_reaches_the_task_and_its_exit_comes_back(rig: Rig) -> None:
    own = rig.servers[0]
    _connected(rig, own)
    exits: list[ExitReport] = []
    own.hub.start(_spec("j3", rig.agent.node.name), exits.append)
    assert own.hub.stop("j3", 1, 0.0)
    _wait(lambda: bool(rig.runner.deliver()) or bool(exits))
    _wait(lambda: len(exits) == 1)
    assert exits[0].job_id == "j3" and exits[0].exit_code is None


def test_a_log_is_read_from_the_agent(rig: Rig) -> None:
    own = rig.servers[0]
    _connected(rig, own)
    own.hub.start(_spec("j4", rig.agent.node.name, ("fake-exit", "0", "hello")), lambda r: None)
    rig.runner.deliver()
    _wait(lambda: "hello" in own.hub.read_log("j4", 1, 100))


def test_a_server_that_does_not_lead_sends_the_agent_to_the_leader_it_names(
    inventory: Inventory, rig: Rig
) -> None:
    own, other = rig.servers
    _connected(rig, own)
    own.listener.leader = other.address
    own.hub.step_down(other.address)
    _connected(rig, other)  # over the servers' transport, whichever link its own server had
    assert rig.client.connected_to == other.address
    assert rig.agent.node.name not in own.hub.ready_nodes()
    other.listener.leader = ""
    other.hub.step_down("")
    own.listener.leader = None
    _connected(rig, own)  # back, over its own link
    assert rig.client.streams == 3


def test_an_exit_while_no_server_takes_the_agent_goes_in_the_next_hello(rig: Rig) -> None:
    own = rig.servers[0]
    _connected(rig, own)
    exits: list[ExitReport] = []
    own.hub.start(_spec("j5", rig.agent.node.name, ("fake-exit", "0")), exits.append)
    own.listener.leader = ""
    own.hub.step_down("")
    _wait(lambda: rig.client.connected_to == "")
    rig.runner.deliver()
    _wait(lambda: rig.agent.unacked() == 1)
    own.listener.leader = None
    _connected(rig, own)
    _wait(lambda: rig.agent.unacked() == 0)
    assert [r.job_id for r in own.listener.exits] == ["j5"]  # taken from the hello
    assert exits == []  # that leader stepped down: a new one hears it as a reconnect


def test_an_exit_between_the_hello_and_the_welcome_is_sent_once_the_stream_is_up(
    rig: Rig,
) -> None:
    """The task is listed as running in the hello, ends before the server welcomes the
    agent: its exit must still reach that server on this stream (no later hello may come)."""
    own = rig.servers[0]
    _connected(rig, own)
    own.hub.start(_spec("j6", rig.agent.node.name, ("fake-exit", "0")), lambda r: None)
    hearing, release = threading.Event(), threading.Event()
    connected = own.listener.agent_connected

    def slow_hello(*args: object) -> None:  # the server takes its time over the hello
        hearing.set()
        release.wait(15)
        connected(*args)  # type: ignore[arg-type]

    own.listener.leader = ""
    own.hub.step_down("")
    _wait(lambda: rig.client.connected_to == "")
    own.listener.agent_connected = slow_hello  # type: ignore[method-assign]
    own.listener.leader = None
    assert hearing.wait(15)
    assert rig.runner.deliver() == 1  # j6 ends after its hello listed it as running
    _wait(lambda: rig.agent.unacked() == 1)
    release.set()
    _connected(rig, own)
    _wait(lambda: rig.agent.unacked() == 0)
    assert [r.job_id for r in own.listener.exits] == ["j6"]


def test_sends_from_many_threads_all_reach_the_agent(rig: Rig) -> None:
    own = rig.servers[0]
    _connected(rig, own)
    node = rig.agent.node.name
    done: list[Future[object]] = []
    lock = threading.Lock()

    def launch(i: int) -> None:
        (error,) = own.hub.start_all([_spec(f"m{i}", node, ("fake-exit", "0"))], lambda r: None)
        fut: Future[object] = Future()
        fut.set_result(error)
        with lock:
            done.append(fut)

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [f.result() for f in done] == [None] * 20
    assert rig.runner.deliver() == 20
    _wait(lambda: rig.agent.unacked() == 0 and rig.agent.running() == 0)


def test_a_second_agent_cannot_take_the_node_while_the_first_holds_it(rig: Rig) -> None:
    own = rig.servers[0]
    _connected(rig, own)
    other = Agent(rig.agent.node, FakeJobRunner())  # another agent process, the same node
    second = AgentClient(other, [own.address], backoff_max_s=0.2, transport=rig.transport)
    second.start()
    try:
        _wait(lambda: own.grpc.gate.refused >= 1)
        assert second.connected_to == "" and second.streams == 0
        assert rig.client.connected_to == rig.target and rig.client.streams == 1
    finally:
        second.stop()


class _Gate:
    """A leader's `renew_leases_while` condition the test flips; counts how often it is asked."""

    def __init__(self) -> None:
        self.open = True
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.open


def test_a_leader_that_may_have_been_superseded_renews_no_lease_nor_welcomes_an_agent(
    rig: Rig,
) -> None:
    """While the hub's condition (replicated: a quorum in the leader's term within one
    election timeout) fails, heartbeats are still recorded but renew nothing, and a hello is
    refused (the agent asks again); once it holds, the agent is welcomed and renewed again."""
    own, gate = rig.servers[0], _Gate()
    own.hub.renew_leases_while(gate)
    _connected(rig, own)
    _wait(lambda: len(rig.lease.renewals) >= 1)
    gate.open = False
    beats = own.listener.beats
    _wait(lambda: own.listener.beats >= beats + 2)  # a renewal asked before the flip has landed
    renewed, beats = len(rig.lease.renewals), own.listener.beats
    _wait(lambda: own.listener.beats >= beats + 3)
    assert len(rig.lease.renewals) == renewed
    own.hub.step_down("")  # the stream ends; the agent's hellos are refused while the gate fails
    _wait(lambda: rig.client.connected_to == "")
    asked = gate.asked
    _wait(lambda: gate.asked >= asked + 2)
    assert rig.client.streams == 1 and rig.agent.node.name not in own.hub.ready_nodes()
    assert len(rig.lease.renewals) == renewed
    gate.open = True
    _connected(rig, own)
    _wait(lambda: len(rig.lease.renewals) > renewed + 1)
    assert rig.client.streams == 2
