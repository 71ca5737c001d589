"""The agent stream's wire: payload codecs, the reset and injection messages, and routing a
fault script to the agent of the node it names."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.agent_wire.codec import (
    exit_from_pb,
    exit_to_pb,
    finding_from_json,
    finding_to_json,
    node_from_json,
    node_to_json,
    spec_from_json,
    spec_to_json,
)
from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb
from gpu_platform.adapters.outbound.sim import SimulatedHardware
from gpu_platform.adapters.outbound.sim.agent_injector import AgentRoutedInjector
from gpu_platform.adapters.outbound.sim.health import script_nodes
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.domain.faults.health import EccReading, XidReport
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchSpec
from gpu_platform.testing.agent_fakes import AcceptingListener, connect
from gpu_platform.testing.fakes import FakeJobRunner


def _round_trip(msg: pb.ServerMessage | pb.AgentMessage) -> pb.ServerMessage | pb.AgentMessage:
    return type(msg).FromString(msg.SerializeToString())


def test_payload_codecs_give_back_equal_values(inventory: Inventory) -> None:
    node = inventory.nodes[0]
    assert node_from_json(node_to_json(node)) == node
    spec = LaunchSpec("j", 3, 2, ("sleep", "1"), (("A", "b"),), (0, 1), ("u0", "u1"), node="n")
    assert spec_from_json(spec_to_json(spec)) == spec
    for finding in (XidReport("n", 1, 48), EccReading("n", 0, 1, 2, True, False)):
        assert finding_from_json(finding_to_json(finding)) == finding
    report = ExitReport("j", 3, None, signal=9, rank=1, detail="killed")
    assert exit_from_pb(exit_to_pb(7, report)) == report


def test_a_payload_of_an_unknown_version_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="health finding: unsupported payload version 2"):
        finding_from_json(b'{"v": 2, "kind": "xid"}')


def test_reset_and_inject_messages_survive_the_wire() -> None:
    reset = _round_trip(pb.ServerMessage(reset_gpu=pb.ResetGpu(request_id=5, index=3, uuid="G")))
    assert isinstance(reset, pb.ServerMessage) and reset.WhichOneof("kind") == "reset_gpu"
    assert (reset.reset_gpu.request_id, reset.reset_gpu.index, reset.reset_gpu.uuid) == (5, 3, "G")
    done = _round_trip(pb.AgentMessage(reset_result=pb.ResetResult(request_id=5, error="lost")))
    assert isinstance(done, pb.AgentMessage) and done.WhichOneof("kind") == "reset_result"
    assert (done.reset_result.request_id, done.reset_result.error) == (5, "lost")
    inject = _round_trip(pb.ServerMessage(inject=pb.Inject(request_id=6, script="xid 48 on gpu 0")))
    assert isinstance(inject, pb.ServerMessage) and inject.inject.script == "xid 48 on gpu 0"
    answer = pb.InjectResult(request_id=6, lines=["a", "b"])
    back = _round_trip(pb.AgentMessage(injected=answer))
    assert isinstance(back, pb.AgentMessage) and back.WhichOneof("kind") == "injected"
    assert list(back.injected.lines) == ["a", "b"] and back.injected.error == ""


def test_script_lines_are_grouped_by_the_node_they_name() -> None:
    script = "xid 48 on gpu 0; temp 95 on gpu 1 node N2 at 3\n# note\nheartbeat stop node n3"
    assert script_nodes(script, "n1") == {
        "n1": ["xid 48 on gpu 0"],
        "n2": ["temp 95 on gpu 1 node N2 at 3"],
        "n3": ["heartbeat stop node n3"],
    }


def test_the_routed_injector_sends_a_script_to_the_agent_of_the_node_it_names(
    inventory: Inventory,
) -> None:
    node = inventory.nodes[0]
    listener = AcceptingListener()
    hub = AgentHub()
    hub.attach(listener)
    sim = SimulatedHardware(inventory, heartbeats=False)
    agent = Agent(node, FakeJobRunner(), (sim,), gpu_reset=sim, injector=sim)
    agent.start()
    try:
        connect(hub, agent)
        routed = AgentRoutedInjector(hub, default_node="this-server")
        assert routed.inject(f"xid 48 on gpu 2 node {node.name}") == [
            f"xid 48 on gpu 2 node {node.name}"
        ]
        assert XidReport(node.name, 2, 48) in listener.findings
        with pytest.raises(ValueError, match="'this-server' has no connected agent"):
            routed.inject("xid 48 on gpu 2")
        with pytest.raises(ValueError, match="names nodes a, b: inject one node's faults"):
            routed.inject("xid 48 on gpu 0 node a; xid 48 on gpu 0 node b")
        with pytest.raises(ValueError, match="has no GPU 42"):
            routed.inject(f"xid 48 on gpu 42 node {node.name}")
    finally:
        sim.stop()
