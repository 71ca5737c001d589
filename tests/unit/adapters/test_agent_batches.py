"""Agent-stream batches: what is packed is read back as the same messages in order, within
the size bound; and on a real `AgentGrpcServer`, a burst of launches reaches an agent that reads
batches as one batch and an agent of an earlier release (no `Hello.batches`) one by one."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.agent_wire import batches
from gpu_platform.adapters.agent_wire.batches import (
    agent_messages,
    pack_agent,
    pack_server,
    server_messages,
)
from gpu_platform.adapters.agent_wire.codec import node_to_json, spec_to_json
from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb
from gpu_platform.adapters.agent_wire.v1 import agent_pb2_grpc as pb_grpc
from gpu_platform.adapters.inbound.agent_client import AgentClient
from gpu_platform.adapters.inbound.grpc.agent_service import AgentGrpcServer
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.job_runner import LaunchSpec
from gpu_platform.testing.agent_fakes import AcceptingListener
from gpu_platform.testing.fakes import FakeJobRunner

_server_msgs = st.one_of(
    st.builds(
        lambda r, b: pb.ServerMessage(launch=pb.Launch(request_id=r, spec_json=b)),
        st.integers(0, 2**63),
        st.binary(max_size=300),
    ),
    st.builds(lambda s: pb.ServerMessage(exit_ack=pb.ExitAck(seq=s)), st.integers(0, 2**63)),
    st.builds(lambda j: pb.ServerMessage(stop=pb.Stop(job_id=j, epoch=1)), st.text(max_size=20)),
)
_agent_msgs = st.one_of(
    st.builds(
        lambda r, e: pb.AgentMessage(launched=pb.LaunchResult(request_id=r, error=e)),
        st.integers(0, 2**63),
        st.text(max_size=50),
    ),
    st.builds(
        lambda s, j: pb.AgentMessage(exit=pb.TaskExit(seq=s, job_id=j, has_exit_code=True)),
        st.integers(0, 2**63),
        st.text(max_size=20),
    ),
    st.builds(
        lambda r, d: pb.AgentMessage(log=pb.LogData(request_id=r, data=d)),
        st.integers(0, 2**63),
        st.binary(max_size=2000),
    ),
)


_SIDES = {
    "server": (_server_msgs, pack_server, server_messages, pb.ServerMessage),
    "agent": (_agent_msgs, pack_agent, agent_messages, pb.AgentMessage),
}


@pytest.mark.parametrize("side", sorted(_SIDES))
@settings(max_examples=200, deadline=None)
@given(data=st.data(), bound=st.integers(64, 4096))
def test_messages_packed_read_back_the_same_in_order_within_the_bound(
    side: str, data: st.DataObject, bound: int
) -> None:
    messages, pack, unpack, cls = _SIDES[side]
    items = data.draw(st.lists(messages, min_size=1, max_size=30))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batches, "BATCH_BYTES", bound)
        wire = [cls.FromString(m.SerializeToString()) for m in pack(items)]  # type: ignore[attr-defined,operator]
    assert [one for m in wire for one in unpack(m)] == items  # type: ignore[operator]
    for m in wire:  # a batch holds more than one, and only an oversized message exceeds it
        if m.HasField("batch"):
            assert len(m.batch.messages) > 1
            assert sum(x.ByteSize() for x in m.batch.messages) <= bound


def test_a_batch_holding_a_hello_or_a_batch_is_refused_by_name() -> None:
    inner = pb.AgentMessage(
        batch=pb.AgentBatch(messages=[pb.AgentMessage(heartbeat=pb.Heartbeat())])
    )
    for bad, kind in ((pb.AgentMessage(hello=pb.Hello(node="n")), "hello"), (inner, "batch")):
        msg = pb.AgentMessage(batch=pb.AgentBatch(messages=[bad]))
        with pytest.raises(ValueError, match=f"may not hold a {kind}"):
            agent_messages(msg)


class _RawAgent:
    """An agent stream spoken by hand: the hello, then whatever the test queues."""

    def __init__(self, address: str, inventory: Inventory, batches: bool) -> None:
        node = inventory.nodes[0]
        self.outbox: queue.Queue[pb.AgentMessage | None] = queue.Queue()
        self.outbox.put(
            pb.AgentMessage(
                hello=pb.Hello(
                    node=node.name,
                    node_json=node_to_json(node),
                    version="1",
                    instance="raw",
                    batches=batches,
                )
            )
        )
        self.received: queue.Queue[pb.ServerMessage] = queue.Queue()
        self._channel = grpc.insecure_channel(address)
        stub = pb_grpc.AgentServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._call = stub.Connect(iter(self.outbox.get, None), timeout=30)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for msg in self._call:
                self.received.put(msg)
        except grpc.RpcError:
            pass

    def close(self) -> None:
        self.outbox.put(None)
        self._call.cancel()
        self._channel.close()
        self._reader.join(timeout=10)


@pytest.fixture
def server() -> Iterator[tuple[AgentHub, AgentGrpcServer]]:
    hub = AgentHub(launch_timeout_s=10.0)
    hub.attach(AcceptingListener())
    grpc_server = AgentGrpcServer(hub, "127.0.0.1", 0, heartbeat_s=1.0)
    grpc_server.start()
    yield hub, grpc_server
    grpc_server.stop(grace_s=0.1)


def _wait(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.mark.parametrize("reads_batches", [True, False])
def test_a_burst_of_launches_comes_as_one_batch_only_to_an_agent_that_reads_batches(
    server: tuple[AgentHub, AgentGrpcServer], inventory: Inventory, reads_batches: bool
) -> None:
    hub, grpc_server = server
    node = inventory.nodes[0].name
    agent = _RawAgent(f"127.0.0.1:{grpc_server.port}", inventory, reads_batches)
    try:
        welcome = agent.received.get(timeout=10)
        assert welcome.WhichOneof("kind") == "welcome" and welcome.welcome.batches
        _wait(lambda: node in hub.ready_nodes())
        # A scheduling cycle's launches, sent while the server's event loop is busy: all
        # eight are queued before it runs again.
        busy = threading.Event()
        grpc_server._loop.call_soon_threadsafe(busy.wait, 10)
        specs = [
            LaunchSpec(f"j{i}", 1, 1, ("fake-forever",), (), (), (), node=node) for i in range(8)
        ]
        outcome: list[object] = []
        sender = threading.Thread(
            target=lambda: outcome.append(hub.start_all(specs, lambda r: None))
        )
        sender.start()
        session = grpc_server._servicer._claims[node][1]  # the stream's session
        _wait(lambda: len(session._items) == 8)  # all queued while the loop is held
        busy.set()
        launches: list[pb.ServerMessage] = []
        wire = 0
        while len(launches) < 8:
            msg = agent.received.get(timeout=10)
            wire += 1
            launches.extend(m for m in server_messages(msg) if m.HasField("launch"))
        assert wire == (1 if reads_batches else 8)
        ids = [m.launch.request_id for m in launches]
        assert ids == sorted(ids) and len(set(ids)) == 8
        # The answers, as one batch: each launch is taken.
        answers = [
            pb.AgentMessage(launched=pb.LaunchResult(request_id=m.launch.request_id))
            for m in launches
        ]
        (batch,) = pack_agent(answers)
        agent.outbox.put(batch)
        sender.join(timeout=10)
        assert outcome == [[None] * 8]
    finally:
        agent.close()


class _OldOrNewServer(pb_grpc.AgentServiceServicer):
    """A server end spoken by hand: welcomes with or without `batches`, then sends what the
    test queues and records what the agent sends."""

    def __init__(self, batches: bool) -> None:
        self.batches = batches
        self.outbox: queue.Queue[pb.ServerMessage | None] = queue.Queue()
        self.received: queue.Queue[pb.AgentMessage] = queue.Queue()

    def Connect(self, request_iterator: Any, context: grpc.ServicerContext) -> Any:
        hello = next(request_iterator)
        self.received.put(hello)
        threading.Thread(target=self._read, args=(request_iterator,), daemon=True).start()
        yield pb.ServerMessage(welcome=pb.Welcome(heartbeat_interval_s=60, batches=self.batches))
        while (msg := self.outbox.get()) is not None:
            yield msg

    def _read(self, requests: Any) -> None:
        with contextlib.suppress(grpc.RpcError, ValueError):
            for msg in requests:
                self.received.put(msg)


@pytest.mark.parametrize("reads_batches", [True, False])
def test_the_agent_reads_a_server_batch_and_batches_only_to_a_server_that_reads_them(
    inventory: Inventory, reads_batches: bool
) -> None:
    servicer = _OldOrNewServer(reads_batches)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_AgentServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    node = inventory.nodes[0]
    runner = FakeJobRunner()
    client = AgentClient(Agent(node, runner), [f"127.0.0.1:{port}"], backoff_max_s=0.2)
    client.start()
    try:
        hello = servicer.received.get(timeout=10)
        assert hello.hello.batches  # this agent reads batches, whatever the server does
        specs = [
            LaunchSpec(f"j{i}", 1, 1, ("fake-exit", "0"), (), (), (), node=node.name)
            for i in range(6)
        ]
        launches = [
            pb.ServerMessage(launch=pb.Launch(request_id=i + 1, spec_json=spec_to_json(spec)))
            for i, spec in enumerate(specs)
        ]
        # To an agent that reads batches a server may send them whatever it was told.
        servicer.outbox.put(pb.ServerMessage(batch=pb.ServerBatch(messages=launches)))
        _wait(lambda: len(runner.live()) == 6)
        runner.deliver()  # all six exit at once: the agent queues their exits together
        seen: list[pb.AgentMessage] = []
        while sum(m.HasField("exit") for m in seen) < 6 or (
            sum(m.HasField("launched") for m in seen) < 6  # the answers may come after
        ):
            msg = servicer.received.get(timeout=10)
            if msg.HasField("batch"):
                assert reads_batches, "a batch went to a server that does not read them"
            seen.extend(agent_messages(msg))
        answers = [m.launched.request_id for m in seen if m.HasField("launched")]
        assert sorted(answers) == [1, 2, 3, 4, 5, 6]
        assert all(not m.launched.error for m in seen if m.HasField("launched"))
    finally:
        client.stop()
        servicer.outbox.put(None)
        server.stop(0)
