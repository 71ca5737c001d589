"""An agent of another cluster (or with no token) is refused with the reason in both logs, and
its node never registers; the cluster's own agents keep working. Refused agents and Raft
senders are in the server's audit records."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.raft_tcp.wire import encode_hello, read_answer
from gpu_platform.testing.cluster_procs import ENTRY, ReplicatedCluster, wait_until

WAIT = 90.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ReplicatedCluster]:
    c = ReplicatedCluster(tmp_path, servers=1, agents=1).start()
    try:
        c.wait_ready(timeout=WAIT)
        yield c
    finally:
        c.close()


def _stranger(c: ReplicatedCluster, token: str | None, log: Path) -> subprocess.Popen[bytes]:
    env = dict(c.env)
    env.pop("GPU_PLATFORM_CLUSTER_TOKEN")
    if token is not None:
        env["GPU_PLATFORM_CLUSTER_TOKEN"] = token
    servers = ",".join(f"127.0.0.1:{p}" for p in c.agent_ports.values())
    argv = [
        *ENTRY, "agent", "--servers", servers, "--node", "stranger",
        "--sim-profile", "dgx-a100", "--data-dir", str(log.parent / "stranger"),
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_an_agent_with_another_clusters_token_is_refused_and_never_registers(
    cluster: ReplicatedCluster, tmp_path: Path
) -> None:
    c = cluster
    log = tmp_path / "stranger.log"
    proc = _stranger(c, "gpc_another_cluster_entirely_0001", log)
    try:
        assert wait_until(lambda: "refused by the server" in log.read_text(), WAIT), log.read_text()
        assert "another cluster's token" in log.read_text()
        server_log = (c.root / "server-1.log").read_text()
        assert "agent refused" in server_log and "stranger" in server_log
        nodes = {n["name"] for n in c.client.get(c.url(1) + "/v1/nodes").json()}
        assert nodes == {"node-1"}
        job = c.submit(["true"], gpus=1)  # the cluster's own agent still runs work
        assert wait_until(lambda: c.job(job["id"])["state"] == "COMPLETED", WAIT)
        # A forged Raft sender holding the token is refused too (the default TCP transport
        # answers its hello with the reason); both land in the audit log.
        token = c.env["GPU_PLATFORM_CLUSTER_TOKEN"]
        with socket.create_connection(("127.0.0.1", c.raft[1]), timeout=30) as sock:
            sock.sendall(encode_hello(99, 1, token))
            with sock.makefile("rb") as f:
                refusal = read_answer(f)
        assert refusal is not None and "not a member of this cluster" in refusal
        audit = c.client.get(c.url(1) + "/v1/audit").json()
        refusals = {(a["action"], a["actor"]) for a in audit if a["outcome"].startswith("refused")}
        assert {("agent.connect", "agent stranger"), ("raft.connect", "server 99")} <= refusals
    finally:
        proc.kill()
        proc.wait()


def test_an_agent_without_a_token_does_not_start(
    cluster: ReplicatedCluster, tmp_path: Path
) -> None:
    log = tmp_path / "stranger.log"
    proc = _stranger(cluster, None, log)
    assert proc.wait(timeout=60) != 0
    lines = log.read_text().strip().splitlines()
    assert lines[-1].startswith("error: cluster_token: an agent needs this cluster's token")


def test_nodes_remove_takes_out_a_gone_node_and_refuses_a_connected_one(
    tmp_path: Path,
) -> None:
    c = ReplicatedCluster(tmp_path, servers=1, agents=2).start()
    try:
        c.wait_ready(timeout=WAIT)
        c.agents["node-2"].kill()  # gone for good: its stream breaks at once
        c.agents["node-2"].wait()
        assert wait_until(lambda: "node-2" not in c.agents_connected(1), WAIT)
        refused = c.cli("nodes", "remove", "node-1", "--reason", "oops", "--server", c.url(1))
        assert refused.returncode != 0 and "agent is connected" in refused.stderr
        done = c.cli("nodes", "remove", "node-2", "--reason", "retired", "--server", c.url(1))
        assert done.returncode == 0, done.stderr
        listed = c.cli("nodes", "--server", c.url(1))
        assert "node-1" in listed.stdout and "node-2" not in listed.stdout
        again = c.cli("nodes", "remove", "node-2", "--server", c.url(1))
        assert again.returncode != 0 and "node-2" in again.stderr
        with grpc.insecure_channel(f"127.0.0.1:{c.grpc[1]}") as channel:
            admin = pb_grpc.AdminServiceStub(channel)
            with pytest.raises(grpc.RpcError) as busy:
                admin.RemoveNode(pb.RemoveNodeRequest(node="node-1", reason="x"), timeout=30)
            assert busy.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "agent is connected" in (busy.value.details() or "")
            with pytest.raises(grpc.RpcError) as gone:
                admin.RemoveNode(pb.RemoveNodeRequest(node="node-2"), timeout=30)
            assert gone.value.code() is grpc.StatusCode.NOT_FOUND
        audit = c.client.get(c.url(1) + "/v1/audit").json()
        removals = [(a["target"], a["outcome"]) for a in audit if a["action"] == "remove"]
        assert ("node node-2", "ok") in removals
        assert any(t == "node node-1" and o.startswith("refused") for t, o in removals)
    finally:
        c.close()
