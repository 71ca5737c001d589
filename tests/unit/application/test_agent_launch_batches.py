"""A cycle's launches through the hub at once (`AgentHub.start_all`): every launch is sent
before any answer is awaited, each spec gets its own outcome, and the hub's bookkeeping per
attempt (exits, stops) stays right."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future

import pytest

from gpu_platform.adapters.outbound.sim.profiles import profile_node
from gpu_platform.application.agent_hub import AgentHub, AgentUnavailable
from gpu_platform.domain.model.node import Node
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec
from gpu_platform.testing.agent_fakes import AcceptingListener


class HeldSession:
    """An agent stream that answers nothing by itself: the test answers its launches."""

    def __init__(self, node: str) -> None:
        self._node = node
        self.launches: list[tuple[int, LaunchSpec]] = []
        self.stops: list[tuple[str, int]] = []
        self.acks: list[int] = []
        self.sent = threading.Condition()

    @property
    def node(self) -> str:
        return self._node

    def send_launch(self, request_id: int, spec: LaunchSpec) -> None:
        with self.sent:
            self.launches.append((request_id, spec))
            self.sent.notify_all()

    def send_stop(self, job_id: str, epoch: int, grace_s: float) -> None:
        self.stops.append((job_id, epoch))

    def send_read_log(
        self, request_id: int, job_id: str, attempt: int, rank: int, offset: int, max_bytes: int
    ) -> None:
        pass

    def send_exit_ack(self, seq: int) -> None:
        self.acks.append(seq)

    def send_reset(self, request_id: int, index: int, uuid: str) -> None:
        pass

    def send_inject(self, request_id: int, script: str) -> None:
        pass

    def close(self, leader: str) -> None:
        pass


def _spec(job: str, node: Node, rank: int = 0, gpu: int = 0) -> LaunchSpec:
    return LaunchSpec(
        job, 1, 1, ("fake-forever",), (), (gpu,), (node.gpus[gpu].uuid,), rank=rank, node=node.name
    )


def _open(hub: AgentHub, node: Node) -> HeldSession:
    session = HeldSession(node.name)
    hub.open(session, node, ())
    return session


def _start_all_in_background(
    hub: AgentHub, specs: list[LaunchSpec], exits: list[ExitReport]
) -> Future[list[LaunchError | None]]:
    out: Future[list[LaunchError | None]] = Future()
    threading.Thread(target=lambda: out.set_result(hub.start_all(specs, exits.append))).start()
    return out


@pytest.fixture(scope="module")
def nodes() -> tuple[Node, Node]:
    return profile_node("dgx-a100", "node-a"), profile_node("dgx-a100", "node-b")


@pytest.fixture
def hub() -> AgentHub:
    hub = AgentHub(launch_timeout_s=10.0)
    hub.attach(AcceptingListener())
    return hub


def test_every_launch_is_sent_before_any_answer_and_each_spec_gets_its_own_outcome(
    hub: AgentHub, nodes: tuple[Node, Node]
) -> None:
    a, b = nodes
    on_a, on_b = _open(hub, a), _open(hub, b)
    specs = [_spec("j1", a, gpu=0), _spec("j2", a, gpu=1), _spec("j3", b), _spec("j4", b, gpu=1)]
    exits: list[ExitReport] = []
    done = _start_all_in_background(hub, specs, exits)
    with on_b.sent:  # all four go out while none has been answered
        assert on_b.sent.wait_for(lambda: len(on_a.launches) + len(on_b.launches) == 4, 10)
    assert not done.done()
    answers = {"j1": "", "j2": "no such binary", "j3": "", "j4": ""}
    for session in (on_b, on_a):  # answered out of order
        for request_id, spec in session.launches:
            hub.launched(session, request_id, answers[spec.job_id])
    outcomes = done.result(timeout=10)
    assert [type(o).__name__ if o else None for o in outcomes] == [
        None,
        "LaunchError",
        None,
        None,
    ]
    assert "no such binary" in str(outcomes[1])
    hub.exited(on_b, 0, ExitReport("j3", 1, 0))  # a started task's exit reaches its handler
    assert [e.job_id for e in exits] == ["j3"]
    assert not hub.stop("j3", 1, 1.0)  # its attempt has no task left on the hub
    assert hub.stop("j4", 1, 1.0)
    assert on_b.stops == [("j4", 1)]
    assert not hub.stop("j2", 1, 1.0)  # a launch that failed leaves nothing to stop


def test_a_spec_for_a_node_without_an_agent_is_unavailable_and_the_others_still_run(
    hub: AgentHub, nodes: tuple[Node, Node]
) -> None:
    a, gone = nodes
    on_a = _open(hub, a)
    done = _start_all_in_background(hub, [_spec("j1", gone), _spec("j2", a)], [])
    with on_a.sent:
        assert on_a.sent.wait_for(lambda: len(on_a.launches) == 1, 10)
    ((request_id, _),) = on_a.launches
    hub.launched(on_a, request_id, "")
    first, second = done.result(timeout=10)
    assert isinstance(first, AgentUnavailable)
    assert f"{gone.name!r} has no connected agent" in str(first)
    assert second is None


def test_launches_not_answered_in_time_are_all_unavailable_and_none_is_tracked(
    nodes: tuple[Node, Node],
) -> None:
    hub = AgentHub(launch_timeout_s=0.3)
    hub.attach(AcceptingListener())
    a = nodes[0]
    on_a = _open(hub, a)
    outcomes = hub.start_all([_spec("j1", a, gpu=g) for g in range(4)], lambda _: None)
    assert len(on_a.launches) == 4
    assert all(isinstance(o, AgentUnavailable) for o in outcomes)
    assert "did not answer the launch in 0.3s" in str(outcomes[0])
    assert not hub.stop("j1", 1, 1.0)  # none of them is tracked as running


def test_a_gang_s_ranks_are_tracked_per_attempt_until_the_last_one_exits(
    hub: AgentHub, nodes: tuple[Node, Node]
) -> None:
    a, b = nodes
    on_a, on_b = _open(hub, a), _open(hub, b)
    exits: list[ExitReport] = []
    done = _start_all_in_background(hub, [_spec("g", a, 0), _spec("g", b, 1)], exits)
    with on_b.sent:
        assert on_b.sent.wait_for(lambda: on_a.launches and on_b.launches, 10)
    for session in (on_a, on_b):
        for request_id, _ in session.launches:
            hub.launched(session, request_id, "")
    assert done.result(timeout=10) == [None, None]
    hub.exited(on_a, 0, ExitReport("g", 1, 1, rank=0))
    assert hub.stop("g", 1, 1.0)  # rank 1 still runs on b
    assert on_b.stops == [("g", 1)] and on_a.stops == []
    hub.exited(on_b, 0, ExitReport("g", 1, 0, rank=1))
    assert [e.rank for e in exits] == [0, 1]  # both reached the attempt's handler
    assert not hub.stop("g", 1, 1.0)


def test_one_stream_s_exits_reach_the_batch_handler_in_one_call_and_are_acknowledged_after(
    hub: AgentHub, nodes: tuple[Node, Node]
) -> None:
    a, _ = nodes
    on_a = _open(hub, a)
    calls: list[list[str]] = []
    acked_when_called: list[int] = []
    acks = on_a.acks

    def many(reports: Sequence[ExitReport]) -> None:
        acked_when_called.append(len(acks))
        calls.append([r.job_id for r in reports])

    specs = [_spec(f"j{g}", a, gpu=g) for g in range(3)]
    out: Future[list[LaunchError | None]] = Future()
    threading.Thread(
        target=lambda: out.set_result(hub.start_all(specs, lambda _: None, many))
    ).start()
    with on_a.sent:
        assert on_a.sent.wait_for(lambda: len(on_a.launches) == 3, 10)
    for request_id, _ in on_a.launches:
        hub.launched(on_a, request_id, "")
    assert out.result(timeout=10) == [None, None, None]
    hub.exited_all(on_a, [(7, ExitReport("j0", 1, 0)), (8, ExitReport("j2", 1, 0))])
    assert calls == [["j0", "j2"]]
    assert acked_when_called == [0] and acks == [7, 8]  # acknowledged once handled
    assert not hub.stop("j0", 1, 1.0) and hub.stop("j1", 1, 1.0)


def test_an_exit_of_an_attempt_this_hub_did_not_start_goes_to_the_listener(
    nodes: tuple[Node, Node],
) -> None:
    listener = AcceptingListener()
    hub = AgentHub()
    hub.attach(listener)
    on_a = _open(hub, nodes[0])
    hub.exited_all(on_a, [(1, ExitReport("before-failover", 3, 0))])
    assert [r.job_id for r in listener.exits] == ["before-failover"]
