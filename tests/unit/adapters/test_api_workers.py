"""API workers (`api_workers = N`): the frames and the link that carries them, who may name a
client's address, and real
worker processes in front of a server: the same answers as the server's own port for any
SubmitJob (a property), authentication, a worker that dies, and nothing left at the end.
(test_grpc_api.py runs each of its gRPC scenarios through two workers too.)"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.grpc_bind import PortUnavailable
from gpu_platform.adapters.inbound.grpc.front_codec import (
    Answer,
    Item,
    decode_answers,
    decode_items,
    encode_answers,
    encode_items,
)
from gpu_platform.adapters.inbound.grpc.front_core import (
    PEER_METADATA,
    ItemContext,
    forwarded_peer,
)
from gpu_platform.adapters.inbound.grpc.front_link import BatchLink, BatchListener
from gpu_platform.adapters.inbound.grpc.front_worker import forwarded_metadata
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.api_workers import api_socket
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container
from gpu_platform.testing.api_workers import worker_pids
from gpu_platform.testing.wired import admin_and_user, use_fakes

text = st.text(max_size=20)
pairs = st.lists(st.tuples(text, text), max_size=4).map(tuple)
items = st.builds(
    Item, pairs, text, st.floats(allow_nan=False, allow_infinity=False), st.binary(max_size=64)
)
answers = st.builds(Answer, st.integers(0, 2**32 - 1), text, pairs, st.binary(max_size=64))


@given(st.lists(items, max_size=5), st.lists(answers, max_size=5))
def test_frames_come_back_as_they_went(sent: list[Item], said: list[Answer]) -> None:
    assert decode_items(encode_items(sent)) == sent
    assert decode_answers(encode_answers(said)) == said


@given(st.lists(items, min_size=1, max_size=3), st.data())
def test_a_cut_or_padded_frame_is_refused(sent: list[Item], data: st.DataObject) -> None:
    frame = encode_items(sent)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ValueError, match="front frame"):
        decode_items(frame[:cut])
    with pytest.raises(ValueError, match="front frame"):
        decode_items(frame + b"\0")


class _Peer:
    def __init__(self, peer: str, metadata: tuple[tuple[str, str], ...]) -> None:
        self._peer, self._metadata = peer, metadata
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise RuntimeError(details)


def test_only_the_unix_socket_may_name_the_clients_address() -> None:
    claimed = ((PEER_METADATA, "ipv4:10.9.9.9:1"),)
    assert forwarded_peer(_Peer("ipv4:127.0.0.1:5000", claimed)) == "ipv4:127.0.0.1:5000"
    assert forwarded_peer(_Peer("unix:/d/api.sock", claimed)) == "ipv4:10.9.9.9:1"


def test_a_worker_forwards_the_real_address_not_the_clients_claim() -> None:
    sent = (("authorization", "Bearer t"), (PEER_METADATA, "ipv4:6.6.6.6:1"), ("grpc-x", "y"))
    forwarded = forwarded_metadata(_Peer("ipv4:127.0.0.1:5000", sent))
    assert forwarded == (("authorization", "Bearer t"), (PEER_METADATA, "ipv4:127.0.0.1:5000"))


@pytest.fixture
def link_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fl-", dir="/tmp") as tmp:
        yield Path(tmp)


def test_the_front_link_answers_each_frame_in_turn_whole(link_dir: Path) -> None:
    path = str(link_dir / "s.sock")
    listener = BatchListener(path, lambda frame: frame[::-1])
    link = BatchLink(path)
    try:
        assert Path(path).stat().st_mode & 0o777 == 0o600
        big = os.urandom(3 << 20)  # read in pieces
        for frame in (b"", b"abc", big):
            assert link.call(frame, timeout=10) == frame[::-1]
    finally:
        link.close()
        listener.close()
    assert not Path(path).exists()


def test_a_late_answer_is_never_taken_for_the_next_frames(link_dir: Path) -> None:
    path = str(link_dir / "s.sock")
    listener = BatchListener(
        path, lambda frame: (time.sleep(0.5) if frame == b"slow" else None) or frame
    )
    link = BatchLink(path)
    try:
        with pytest.raises(TimeoutError):
            link.call(b"slow", timeout=0.1)
        assert link.call(b"next", timeout=10) == b"next"  # a new connection
    finally:
        link.close()
        listener.close()


def test_a_frame_the_server_cannot_read_closes_its_connection(link_dir: Path) -> None:
    path = str(link_dir / "s.sock")

    def refuse(frame: bytes) -> bytes:
        raise ValueError("front frame: not items")

    listener = BatchListener(path, refuse)
    try:
        with pytest.raises(ConnectionError):
            BatchLink(path).call(b"junk", timeout=10)
    finally:
        listener.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another account")
def test_the_front_link_refuses_another_account(link_dir: Path) -> None:
    link_dir.chmod(0o755)  # in /tmp: reachable by another account
    path = str(link_dir / "s.sock")
    listener = BatchListener(path, lambda frame: frame)
    os.chmod(path, 0o666)  # past the file mode: the peer's uid is checked too
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        code = 1
        try:
            os.setuid(65534)
            BatchLink(path).call(b"x", timeout=5)
        except ConnectionError:
            code = 3
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(child, 0)
    finally:
        listener.close()
    assert os.waitstatus_to_exitcode(status) == 3


def test_an_items_deadline_and_address_are_the_calls() -> None:
    ctx = ItemContext(Item((("a", "b"),), "ipv4:1.2.3.4:5", 2.0, b""))
    left = ctx.time_remaining()
    assert left is not None and 1.0 < left <= 2.0
    assert ctx.peer() == "ipv4:1.2.3.4:5" and ctx.invocation_metadata() == (("a", "b"),)
    assert ItemContext(Item((), "", -1.0, b"")).time_remaining() is None


def test_a_data_dir_too_deep_for_a_unix_socket_is_refused() -> None:
    deep = Path("/tmp") / ("d" * 120)
    with pytest.raises(PortUnavailable, match="longer than a Unix socket allows"):
        api_socket(Settings(data_dir=deep, api_workers=1))


def _served(inventory: Inventory, workers: int, **extra: Any) -> Iterator[Container]:
    with tempfile.TemporaryDirectory(prefix="aw-") as tmp:
        container = Container(
            settings=Settings(
                server_id=0,
                data_dir=Path(tmp),
                grpc_port=0,
                api_workers=workers,
                schedule_interval_seconds=3600,  # held: nothing leaves QUEUED
                **extra,
            )
        )
        use_fakes(container, inventory)
        try:
            yield container
        finally:
            container.shutdown_resources()


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Any, Any]]:
    """The same fake-backed server twice: on its own port, and behind two workers."""
    inventory = Inventory((default_node(),), source="sim", simulated=True)
    direct, fronted = _served(inventory, 0), _served(inventory, 2)
    a, b = next(direct), next(fronted)
    try:
        with (
            grpc.insecure_channel(a.grpc_server().address) as ca,
            grpc.insecure_channel(b.grpc_server().address) as cb,
        ):
            yield pb_grpc.JobServiceStub(ca), pb_grpc.JobServiceStub(cb)
    finally:
        for gen in (direct, fronted):
            next(gen, None)


def _answer(stub: Any, request: pb.SubmitJobRequest) -> tuple[Any, ...]:
    try:
        job, call = stub.SubmitJob.with_call(request, timeout=10)
    except grpc.RpcError as exc:
        return (exc.code(), exc.details(), dict(exc.trailing_metadata() or ()))
    return (grpc.StatusCode.OK, job.SerializeToString(), dict(call.trailing_metadata() or ()))


requests = st.builds(
    pb.SubmitJobRequest,
    command=st.lists(st.sampled_from(["true", "", "x\0y", "sleep", "1"]), max_size=3),
    gpus=st.integers(-2, 12),
    tenant=st.sampled_from(["", "default", "team-a", "bad tenant!"]),
    name=st.text(max_size=8),
    env=st.dictionaries(st.sampled_from(["K", "1BAD", "PATH"]), st.text(max_size=4), max_size=2),
    priority=st.integers(-3, 3),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(requests)
def test_any_submit_gets_the_same_answer_through_a_worker(
    pair: tuple[Any, Any], request: pb.SubmitJobRequest
) -> None:
    """Sequential ids and one manual clock on both: even the accepted jobs' bytes agree."""
    direct, fronted = pair
    assert _answer(fronted, request) == _answer(direct, request)


@pytest.fixture
def authed(inventory: Inventory) -> Iterator[Container]:
    yield from _served(inventory, 2, auth="on")


def test_a_worker_relays_authentication_and_the_audit_names_the_caller(
    authed: Container,
) -> None:
    admin, user = admin_and_user(authed)
    with grpc.insecure_channel(authed.grpc_server().address) as channel:
        jobs = pb_grpc.JobServiceStub(channel)
        request = pb.SubmitJobRequest(command=["true"])
        for bad in ((), (("authorization", "Bearer nope"),)):
            with pytest.raises(grpc.RpcError) as refused:
                jobs.SubmitJob(request, metadata=bad, timeout=10)
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as relayed:
            jobs.GetJob(pb.GetJobRequest(id="j-1"), timeout=10)
        assert relayed.value.code() is grpc.StatusCode.UNAUTHENTICATED
        mine = (("authorization", f"Bearer {user.secret}"),)
        job = jobs.SubmitJob(request, metadata=mine, timeout=10)
        assert job.tenant == "acme"
        with pytest.raises(grpc.RpcError) as other:
            jobs.SubmitJob(pb.SubmitJobRequest(command=["true"], tenant="default"), metadata=mine)
        assert other.value.code() is grpc.StatusCode.PERMISSION_DENIED
        admin_rpc = pb_grpc.AdminServiceStub(channel)
        boss = (("authorization", f"Bearer {admin.secret}"),)
        nodes = admin_rpc.ListNodes(pb.ListNodesRequest(), metadata=boss, timeout=10)
        assert [n.name for n in nodes.nodes] == ["node-0"]
        admin_rpc.ListAudit(pb.AuditRequest(limit=5), metadata=boss, timeout=10)  # allowed
        with pytest.raises(grpc.RpcError) as denied:  # a user reads no audit log
            admin_rpc.ListAudit(pb.AuditRequest(limit=5), metadata=mine, timeout=10)
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
    entries = authed.adapters.audit_log().tail(50)
    trail = [(e["actor"], e["action"], e["target"], e["outcome"]) for e in entries]
    assert ("mallory", "job.submit", f"job {job.id}", "ok") in trail
    refused = [t for t in trail if t[0] == "mallory" and t[3].startswith("refused")]
    assert len(refused) == 1  # the other tenant's submit


def _workers(container: Container) -> list[int]:
    """This container's worker processes (their spec names its socket)."""
    return worker_pids(os.getpid(), str(api_socket(container.settings())))


def test_a_dead_worker_is_replaced_on_the_port_and_none_outlive_the_server(
    inventory: Inventory,
) -> None:
    served = _served(inventory, 2)
    container = next(served)
    try:
        address = container.grpc_server().address
        assert api_socket(container.settings()).stat().st_mode & 0o777 == 0o600
        before = _workers(container)
        assert len(before) == 2
        os.kill(before[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = _workers(container)
            if len(now) == 2 and before[0] not in now:
                break
            time.sleep(0.1)
        assert len(now) == 2 and before[0] not in now
        for _ in range(8):  # fresh connections, spread over both workers
            with grpc.insecure_channel(address) as channel:
                stub = pb_grpc.JobServiceStub(channel)
                assert stub.SubmitJob(pb.SubmitJobRequest(command=["true"]), timeout=10).id
    finally:
        next(served, None)
    assert _workers(container) == []


def test_workers_killed_under_load_lose_and_double_no_job(inventory: Inventory) -> None:
    """Clients retry what a dying worker dropped, with the same request id: every submit is
    acknowledged once, as one job, while every worker is SIGKILLed under them, three times."""
    served = _served(inventory, 2)
    container = next(served)
    address = container.grpc_server().address
    acked: dict[str, str] = {}
    retried: list[str] = []
    lock, killed = threading.Lock(), threading.Event()

    def client(n: int) -> None:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.JobServiceStub(channel)
            i = 0
            while not killed.is_set() or i < 20:
                token, i = f"c{n}-{i}", i + 1
                request = pb.SubmitJobRequest(command=["true"], request_id=token)
                for _ in range(500):
                    try:
                        job = stub.SubmitJob(request, timeout=10)
                        break
                    except grpc.RpcError as exc:
                        assert exc.code() is grpc.StatusCode.UNAVAILABLE, exc
                        with lock:
                            retried.append(token)
                        time.sleep(0.02)
                with lock:
                    acked[token] = job.id

    def killer() -> None:
        for _ in range(3):
            time.sleep(0.3)
            for pid in _workers(container):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30  # both back before the next round
            while len(_workers(container)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        killed.set()

    try:
        threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
        threads.append(threading.Thread(target=killer))
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
        jobs = container.control_plane().list_jobs()
    finally:
        next(served, None)
    assert retried  # the kills did cut calls off
    assert len(set(acked.values())) == len(acked)  # one job per request id, retried or not
    assert sorted(j.id for j in jobs) == sorted(acked.values())
