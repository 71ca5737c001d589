"""GPU resets and fault scripts over the agent stream: the hub (the leader's GpuReset for agent
nodes) and the agent (which runs its node's reset adapter and injector)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gpu_platform.adapters.outbound.sim import SimulatedHardware
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.domain.faults.health import XidReport
from gpu_platform.domain.model.node import Inventory, Node
from gpu_platform.ports.outbound.gpu_reset import GpuResetError
from gpu_platform.ports.outbound.job_runner import LaunchSpec
from gpu_platform.testing.agent_fakes import AcceptingListener, connect
from gpu_platform.testing.fakes import FakeJobRunner


@pytest.fixture
def node(inventory: Inventory) -> Node:
    return inventory.nodes[0]


@pytest.fixture
def sim(inventory: Inventory) -> Iterator[SimulatedHardware]:
    hardware = SimulatedHardware(inventory, heartbeats=False)
    yield hardware
    hardware.stop()


@pytest.fixture
def listener() -> AcceptingListener:
    return AcceptingListener()


def _hub(listener: AcceptingListener, **kw: float) -> AgentHub:
    hub = AgentHub(**kw)
    hub.attach(listener)
    return hub


def _agent(node: Node, sim: SimulatedHardware | None) -> Agent:
    agent = Agent(node, FakeJobRunner(), (sim,) if sim else (), gpu_reset=sim, injector=sim)
    agent.start()
    return agent


def test_the_hub_has_the_node_s_agent_reset_the_gpu_it_names_by_uuid(
    node: Node, sim: SimulatedHardware, listener: AcceptingListener
) -> None:
    hub = _hub(listener)
    session = connect(hub, _agent(node, sim))
    hub.reset(node.name, 3)  # returns: the agent reset it
    assert session.resets == [(3, node.gpus[3].uuid)]


def test_a_reset_the_agent_fails_is_a_reset_error_with_the_agent_s_reason(
    node: Node, sim: SimulatedHardware, listener: AcceptingListener
) -> None:
    hub = _hub(listener)
    connect(hub, _agent(node, sim))
    sim.inject("reset-fail on gpu 1")
    with pytest.raises(GpuResetError, match=f"agent on {node.name}: simulated reset failure"):
        hub.reset(node.name, 1)


def test_a_reset_for_a_node_without_a_connected_agent_fails_at_once(
    listener: AcceptingListener,
) -> None:
    with pytest.raises(GpuResetError, match="'elsewhere' has no connected agent"):
        _hub(listener).reset("elsewhere", 0)


def test_an_agent_that_does_not_answer_a_reset_is_a_reset_error_after_the_timeout(
    node: Node, sim: SimulatedHardware, listener: AcceptingListener
) -> None:
    hub = _hub(listener, reset_timeout_s=0.2)
    connect(hub, _agent(node, sim), silent=True)
    with pytest.raises(GpuResetError, match="did not answer the reset"):
        hub.reset(node.name, 0)


def test_a_reset_in_flight_fails_when_its_agent_s_stream_ends(
    node: Node, sim: SimulatedHardware, listener: AcceptingListener
) -> None:
    hub = _hub(listener, reset_timeout_s=600)
    session = connect(hub, _agent(node, sim), silent=True)
    errors: list[BaseException] = []

    def reset() -> None:
        try:
            hub.reset(node.name, 0)
        except GpuResetError as exc:
            errors.append(exc)

    t = threading.Thread(target=reset)
    t.start()
    while not session.resets:  # the request is out
        t.join(0.01)
    hub.closed(session)
    t.join(30)
    assert not t.is_alive()
    assert len(errors) == 1 and "left" in str(errors[0])


def test_an_agent_without_a_reset_adapter_says_so(node: Node) -> None:
    agent = Agent(node, FakeJobRunner())
    assert agent.reset_gpu(0) == f"no GPU reset controller on node {node.name}"


def test_an_agent_refuses_to_reset_a_gpu_in_use_another_gpu_or_an_unknown_one(
    node: Node, sim: SimulatedHardware
) -> None:
    agent = _agent(node, sim)
    spec = LaunchSpec("j1", 1, 1, ("fake-forever",), (), (2,), (node.gpus[2].uuid,))
    assert agent.launch(spec) == ""
    assert agent.reset_gpu(2) == f"GPU 2 of node {node.name} is in use by job j1"
    assert "not GPU-other" in agent.reset_gpu(1, "GPU-other")
    assert agent.reset_gpu(99) == f"node {node.name} has no GPU 99"
    assert agent.reset_gpu(1, node.gpus[1].uuid) == ""


def test_a_script_sent_to_an_agent_reaches_its_simulated_hardware_and_the_leader(
    node: Node, sim: SimulatedHardware, listener: AcceptingListener
) -> None:
    hub = _hub(listener)
    connect(hub, _agent(node, sim))
    lines = hub.inject(node.name, "xid 48 on gpu 5")
    assert lines == [f"xid 48 on gpu 5 node {node.name}"]
    assert XidReport(node.name, 5, 48) in listener.findings


def test_scripts_are_refused_with_the_reason_by_agents_without_injection_or_agents_at_all(
    node: Node, listener: AcceptingListener
) -> None:
    hub = _hub(listener)
    connect(hub, Agent(node, FakeJobRunner()))
    with pytest.raises(ValueError, match=f"fault injection is disabled on node {node.name}"):
        hub.inject(node.name, "xid 48 on gpu 0")
    with pytest.raises(ValueError, match="'n9' has no connected agent"):
        hub.inject("n9", "xid 48 on gpu 0 node n9")
