"""Only current members speak Raft (issue 20, item 2), over real gRPC on loopback.

A forged sender (an invented node 99 holding the cluster token) proposing a cancel of another
tenant's job is refused, nothing of it is committed, and the refusal is in the audit record.
With mutual TLS, the Raft port admits only `server` certificates naming the sender id: a CLI
user's certificate from the same CA, an agent's, a plain one, or a server's claiming another id
are refused (and audited); peers with their own certificates talk as before.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gpu_platform.adapters.cluster_identity import TOKEN_METADATA
from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport, encode_message
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2 as pb
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.application.cluster_replica import ClusterReplica
from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
from gpu_platform.application.replication import RaftReplication
from gpu_platform.domain.cluster_state import CancelJob, SubmitJob
from gpu_platform.domain.consensus import Entry, Message, MessageType
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.testing.member_pki import MemberPki
from tests.integration.conftest import wait_for

TOKEN = "gpc_members_only_raft_0001"
WAIT = 20.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> MemberPki:
    return MemberPki(tmp_path_factory.mktemp("pki"))


def _send(
    address: str, batch: pb.Batch, *, token: str | None, tls: TlsFiles | None = None
) -> grpc.StatusCode:
    metadata = ((TOKEN_METADATA, token),) if token else ()
    channel = (
        grpc.insecure_channel(address)
        if tls is None
        else grpc.secure_channel(address, tls.grpc_channel_credentials())
    )
    with channel:
        try:
            pb_grpc.RaftStub(channel).Send(batch, metadata=metadata, timeout=WAIT)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


class Leader:
    """A one-voter Raft group (real RaftNode, SQLite log, gRPC transport) and its replica."""

    def __init__(self, data: Path) -> None:
        self.audit: list[AuditRecord] = []
        self.transport = GrpcRaftTransport(
            1, {1: "127.0.0.1:0"}, token=TOKEN, audit=self.audit.append
        )
        self.storage = SqliteRaftStorage(data / "raft.db")
        self.replica = ClusterReplica(FaultPolicy(), threading.RLock())
        config = RaftNodeConfig(id=1, voters=(1,), seed=1)
        self.node = RaftNode(config, self.storage, self.transport, self.replica)
        self.node.start()
        self.raft = RaftReplication(self.node, self.replica)
        assert wait_for(self.raft.is_leader, timeout=WAIT)

    @property
    def address(self) -> str:
        return self.transport.addresses[1]

    def close(self) -> None:
        self.node.stop()
        self.storage.close()


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Leader]:
    node = Leader(tmp_path)
    yield node
    node.close()


def test_an_invented_node_proposing_a_cancel_of_another_tenants_job_is_refused_and_audited(
    leader: Leader,
) -> None:
    spec = JobSpec(command=("train",), tenant="victim")
    leader.raft.submit(SubmitJob("job-1", spec, 1.0)).result(timeout=WAIT)
    forged_cancel = leader.replica.encode(CancelJob("job-1", 2.0, "forged"), "forged-1")
    proposal = Message(MessageType.PROP, to=1, from_=99, entries=(Entry(0, 0, data=forged_cancel),))
    batch = pb.Batch(from_id=99, to_id=1, messages=[encode_message(proposal)])

    assert _send(leader.address, batch, token=TOKEN) is grpc.StatusCode.PERMISSION_DENIED

    # Raft applies in log order: once a later proposal is applied, the forged one would have been.
    leader.raft.submit(SubmitJob("job-2", spec, 3.0)).result(timeout=WAIT)
    with leader.raft.lock:
        assert leader.raft.state.job("job-1").state is JobState.QUEUED  # not CANCELLED
    refusals = [a for a in leader.audit if a.action == "raft.connect"]
    assert len(refusals) == 1 and refusals[0].actor == "server 99"
    assert refusals[0].outcome == "refused: node 99 is not a member of this cluster"
    assert leader.transport.stats.refused == 1


def test_the_same_proposal_from_a_sender_without_the_token_is_refused_and_audited(
    leader: Leader,
) -> None:
    batch = pb.Batch(from_id=1, to_id=1, messages=[])
    assert _send(leader.address, batch, token=None) is grpc.StatusCode.UNAUTHENTICATED
    assert [a.outcome.split(";")[0] for a in leader.audit] == [
        "refused: it presents no cluster token"
    ]


def _heartbeat(sender: int) -> pb.Batch:
    beat = Message(MessageType.HEARTBEAT, to=1, from_=sender, term=1, commit=0)
    return pb.Batch(from_id=sender, to_id=1, messages=[encode_message(beat)])


@pytest.fixture(scope="module")
def mtls_member(pki: MemberPki) -> Iterator[tuple[GrpcRaftTransport, list[AuditRecord]]]:
    audit: list[AuditRecord] = []
    peers = {1: "127.0.0.1:0", 2: "127.0.0.1:1", 3: "127.0.0.1:1"}  # 2, 3 are never dialled
    t = GrpcRaftTransport(1, peers, tls=pki.tls("server", "1"), token=TOKEN, audit=audit.append)
    t.start(lambda _: None, lambda _: None, lambda _p, _ok: None)
    yield t, audit
    t.stop()


@pytest.mark.parametrize(
    ("who", "sender", "expected"),
    [
        (("server", "2"), 2, grpc.StatusCode.OK),
        (("client", "alice"), 2, grpc.StatusCode.PERMISSION_DENIED),
        (("agent", "node-a"), 2, grpc.StatusCode.PERMISSION_DENIED),
        (("plain", "alice"), 2, grpc.StatusCode.PERMISSION_DENIED),
        (("server", "2"), 3, grpc.StatusCode.PERMISSION_DENIED),
    ],
    ids=["own-server-cert", "cli-user-cert", "agent-cert", "cert-binding-no-member", "other-id"],
)
def test_with_mtls_the_raft_port_admits_only_a_server_certificate_naming_the_sender(
    pki: MemberPki,
    mtls_member: tuple[GrpcRaftTransport, list[AuditRecord]],
    who: tuple[str, str],
    sender: int,
    expected: grpc.StatusCode,
) -> None:
    t, audit = mtls_member
    role, name = who
    tls = pki.plain(name) if role == "plain" else pki.tls(role, name)
    before = len(audit)
    assert _send(t.addresses[1], _heartbeat(sender), token=TOKEN, tls=tls) is expected
    if expected is grpc.StatusCode.OK:
        assert len(audit) == before
    else:
        assert len(audit) == before + 1 and audit[-1].actor.startswith(f"server {sender}")
        assert audit[-1].outcome.startswith("refused: its certificate")


def test_with_mtls_peers_holding_their_own_server_certificates_exchange_messages(
    pki: MemberPki,
) -> None:
    peers = {1: "127.0.0.1:0", 2: "127.0.0.1:0"}
    b = GrpcRaftTransport(2, peers, tls=pki.tls("server", "2"), token=TOKEN)
    got: queue.Queue[Message] = queue.Queue()
    b.start(got.put, lambda _: None, lambda _p, _ok: None)
    a = GrpcRaftTransport(
        1, b.addresses, listen="127.0.0.1:0", tls=pki.tls("server", "1"), token=TOKEN
    )
    a.start(lambda _: None, lambda _: None, lambda _p, _ok: None)
    try:
        hello = Message(MessageType.HEARTBEAT, to=2, from_=1, term=1, commit=0)
        a.send([hello])
        assert got.get(timeout=WAIT) == hello
        assert b.stats.refused == 0
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("role", ["agent", "client"])
def test_an_agents_or_a_users_certificate_cannot_serve_the_raft_port(
    pki: MemberPki, role: str
) -> None:
    """Their certificates lack serverAuth: a peer dialling such a server refuses the handshake
    (even with 127.0.0.1 among its names), so nothing it would answer is believed."""
    impostor = GrpcRaftTransport(
        2, {2: "127.0.0.1:0"}, tls=pki.tls(role, "x", hosts=("127.0.0.1",)), token=TOKEN
    )
    got: queue.Queue[Message] = queue.Queue()
    impostor.start(got.put, lambda _: None, lambda _p, _ok: None)
    unreachable: queue.Queue[int] = queue.Queue()
    member = GrpcRaftTransport(
        1, impostor.addresses, listen="127.0.0.1:0", tls=pki.tls("server", "1"), token=TOKEN
    )
    member.start(lambda _: None, unreachable.put, lambda _p, _ok: None)
    try:
        member.send([Message(MessageType.HEARTBEAT, to=2, from_=1, term=1, commit=0)])
        assert unreachable.get(timeout=WAIT) == 2
        assert got.empty() and member.stats.sent == 0
    finally:
        member.stop()
        impostor.stop()


def test_a_member_removed_while_its_stream_is_open_is_refused_from_its_next_batch() -> None:
    audit: list[AuditRecord] = []
    member = GrpcRaftTransport(
        1, {1: "127.0.0.1:0", 2: "127.0.0.1:1"}, token=TOKEN, audit=audit.append
    )
    got: queue.Queue[Message] = queue.Queue()
    member.start(got.put, lambda _: None, lambda _p, _ok: None)
    batches: queue.Queue[pb.Batch | None] = queue.Queue()

    def stream() -> Iterator[pb.Batch]:
        while (batch := batches.get()) is not None:
            yield batch

    try:
        with grpc.insecure_channel(member.addresses[1]) as channel:
            call = pb_grpc.RaftStub(channel).Stream.future(
                stream(), metadata=((TOKEN_METADATA, TOKEN),), timeout=WAIT
            )
            batches.put(_heartbeat(2))
            assert got.get(timeout=WAIT).from_ == 2  # a member: delivered
            member.remove_peer(2)
            batches.put(_heartbeat(2))
            with pytest.raises(grpc.RpcError) as refused:
                call.result(timeout=WAIT)
            batches.put(None)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert got.empty()
        assert [a.outcome for a in audit] == ["refused: node 2 is not a member of this cluster"]
    finally:
        member.stop()
