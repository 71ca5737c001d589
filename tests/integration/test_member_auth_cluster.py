"""A three-server cluster on mutual TLS with member certificates, as real processes: each
server holds `gpu-platform://server/<id>` (Raft among them works), the agent holds its node's
certificate and runs jobs; an agent started with a CLI user's certificate from the same CA is
refused, never registers its node, and is in the leader's audit records."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until
from gpu_platform.testing.member_pki import MemberPki
from tests.integration.test_member_auth_agents import RawFramedAgent

WAIT = 90.0


class MtlsCluster(ReplicatedCluster):
    """`ReplicatedCluster` whose servers and agents present their own member certificates,
    and whose REST client presents a `client` one."""

    def __init__(self, root: Path, pki: MemberPki, **kwargs: int) -> None:
        super().__init__(root, **kwargs)
        self.pki = pki
        self.env["GPU_PLATFORM_TLS_CLIENT_CA_FILE"] = str(pki.ca)
        ops = pki.tls("client", "ops")
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(ops.cert, ops.key)
        self.client = httpx.Client(timeout=15.0, follow_redirects=True, verify=context)

    def _present(self, role: str, name: str) -> None:
        tls = self.pki.tls(role, name)
        self.env["GPU_PLATFORM_TLS_CERT_FILE"] = str(tls.cert)
        self.env["GPU_PLATFORM_TLS_KEY_FILE"] = str(tls.key)

    def start_server(self, i: int, *, join: bool = False) -> None:
        self._present("server", str(i))
        super().start_server(i, join=join)

    def start_agent(self, node: str) -> None:
        self._present("agent", node)
        super().start_agent(node)

    def url(self, i: int) -> str:
        return f"https://127.0.0.1:{self.http[i]}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MtlsCluster]:
    c = MtlsCluster(tmp_path, MemberPki(tmp_path / "pki"), servers=3, agents=1)
    c.start()
    try:
        c.wait_ready(timeout=WAIT)
        yield c
    finally:
        for proc in [*c.agents.values(), *c.servers.values()]:  # nothing to keep: be quick
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        c.close()


def test_members_run_jobs_and_an_agent_with_a_users_certificate_is_refused_and_audited(
    cluster: MtlsCluster,
) -> None:
    c = cluster
    job = c.submit(["true"], gpus=1)
    assert wait_until(lambda: c.job(job["id"])["state"] == "COMPLETED", WAIT)

    lead = c.wait_leader()
    rogue = RawFramedAgent(  # the agents' port speaks the default agent_transport, tcp
        f"127.0.0.1:{c.agent_ports[lead]}",
        "node-9",
        c.pki.tls("client", "alice"),
        token=c.env["GPU_PLATFORM_CLUSTER_TOKEN"],
    )
    try:
        assert rogue.answer() is grpc.StatusCode.PERMISSION_DENIED
        assert "its certificate is a client's (alice)" in rogue.details
    finally:
        rogue.close()
    records = c.client.get(c.url(lead) + "/v1/audit").json()
    assert any(
        a["action"] == "agent.connect" and a["actor"] == "agent node-9 (certificate: client alice)"
        for a in records
    )
    nodes = {n["name"] for n in c.client.get(c.url(lead) + "/v1/nodes").json()}
    assert nodes == {"node-1"}
