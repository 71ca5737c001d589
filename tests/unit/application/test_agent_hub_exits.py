"""Exits a hub could not take end their stream, so the agent's next hello carries them."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.sim.profiles import profile_node
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.ports.outbound.job_runner import ExitReport
from gpu_platform.testing.agent_fakes import AcceptingListener
from tests.unit.application.test_agent_launch_batches import HeldSession


class _LosingLead(AcceptingListener):
    """Takes exits until `leader` is set, then refuses them as a server that lost the lead."""

    def __init__(self) -> None:
        super().__init__()
        self.leader: str | None = None

    def accepting(self) -> str | None:
        return self.leader

    def agent_exit(self, report: ExitReport) -> None:
        if self.leader is not None:
            raise LeaderElsewhere(2, "http://elsewhere", "elsewhere:50051")
        super().agent_exit(report)


class _Closing(HeldSession):
    def __init__(self, node: str) -> None:
        super().__init__(node)
        self.closed_with: list[str] = []

    def close(self, leader: str) -> None:
        self.closed_with.append(leader)


def test_an_exit_the_server_could_not_take_ends_the_stream_unacknowledged() -> None:
    hub, listener = AgentHub(), _LosingLead()
    hub.attach(listener)
    node = profile_node("dgx-a100", "node-a")
    session = _Closing(node.name)
    hub.open(session, node, ())
    hub.exited(session, 1, ExitReport("j1", 1, 0))
    assert session.acks == [1] and session.closed_with == []
    listener.leader = "10.0.0.2:7070"  # the lead moved while the next exit was committed
    with pytest.raises(LeaderElsewhere):
        hub.exited(session, 2, ExitReport("j2", 1, 0))
    assert session.acks == [1]  # not acknowledged: the agent keeps it for its next hello
    assert session.closed_with == ["10.0.0.2:7070"]  # and is sent to the leader now
