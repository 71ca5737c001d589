"""The member gate's rules on a stand-in call context: what a certificate must bind, the
in-process agent's unix socket, and how refusals are audited without flooding."""

from __future__ import annotations

import grpc

from gpu_platform.adapters.member_gate import MemberGate, client_certificate_refusal
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.testing.member_pki import FakeCallContext

TOKEN = "gpc_gate_rules_000000001"


def call(peer: str, uris: tuple[str, ...] = (), token: str | None = TOKEN) -> FakeCallContext:
    return FakeCallContext(peer, uris, token)


def test_a_certificate_must_bind_exactly_the_role_and_name_claimed() -> None:
    gate = MemberGate("agent", "agent", token=TOKEN, mtls=True)
    tcp = "ipv4:10.0.0.5:4242"
    assert gate.check(call(tcp, ("gpu-platform://agent/n1",)), "n1") is None
    for uris in [
        ("gpu-platform://agent/n2",),  # another node's
        ("gpu-platform://server/1",),  # a server's
        ("gpu-platform://client/alice",),  # a user's
        (),  # binds no member
        ("gpu-platform://agent/n1", "gpu-platform://client/alice"),  # two members: neither
    ]:
        refusal = gate.check(call(tcp, uris), "n1")
        assert refusal is not None and refusal.code is grpc.StatusCode.PERMISSION_DENIED, uris


def test_the_token_is_asked_for_even_on_the_unix_socket_where_no_certificate_is() -> None:
    gate = MemberGate("agent", "agent", token=TOKEN, mtls=True)
    assert gate.check(call("unix:"), "n1") is None
    refusal = gate.check(call("unix:", token=None), "n1")
    assert refusal is not None and refusal.code is grpc.StatusCode.UNAUTHENTICATED


def test_the_client_api_refuses_only_server_and_agent_certificates() -> None:
    assert client_certificate_refusal(call("ipv4:1.2.3.4:5")) == ""
    assert client_certificate_refusal(call("ipv4:1.2.3.4:5", ("gpu-platform://client/a",))) == ""
    for uri in ("gpu-platform://agent/n1", "gpu-platform://server/1"):
        assert "client certificates only" in client_certificate_refusal(call("ipv4:1:2", (uri,)))


def test_refusals_are_audited_once_per_host_and_reason_per_quiet_period() -> None:
    audit: list[AuditRecord] = []
    gate = MemberGate("raft", "server", token=TOKEN, mtls=False, audit=audit.append, quiet_s=3600)
    for port in range(5):  # a stranger retrying from new source ports
        gate.record(call(f"ipv4:10.0.0.9:{4000 + port}"), "99", "node 99 is not a member")
    gate.record(call("ipv4:10.0.0.9:5000"), "99", "it presents no cluster token")
    gate.record(call("ipv4:10.0.0.8:5000"), "99", "node 99 is not a member")
    assert gate.refused == 7
    assert [(a.target.rpartition(":")[0], a.outcome) for a in audit] == [
        ("ipv4:10.0.0.9", "refused: node 99 is not a member"),
        ("ipv4:10.0.0.9", "refused: it presents no cluster token"),
        ("ipv4:10.0.0.8", "refused: node 99 is not a member"),
    ]
    assert {(a.actor, a.action) for a in audit} == {("server 99", "raft.connect")}


def test_a_flood_of_varied_refusals_is_audited_up_to_a_cap() -> None:
    audit: list[AuditRecord] = []
    gate = MemberGate("raft", "server", token=TOKEN, mtls=False, audit=audit.append, quiet_s=3600)
    for sender in range(1000):
        gate.record(call("ipv4:10.0.0.9:4000"), str(sender), f"node {sender} is not a member")
    assert gate.refused == 1000 and len(audit) == 256
