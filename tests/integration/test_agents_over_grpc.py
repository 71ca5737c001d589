"""`agent_transport = grpc` end to end (the default is tcp, which every other process test
runs over): 3 `serve` servers and 2 `agent` processes on loopback, every one of them with
GPU_PLATFORM_AGENT_TRANSPORT=grpc (real processes, gRPC agent streams, TCP Raft, real SQLite).
Jobs and a gang run on the agents; after a kill -9 of the leader the agents follow the
redirect to the new one, which runs the next job; a SIGSTOPped agent's job is fenced and run
elsewhere. Every wait is generous; nothing asserts on time."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_platform.adapters.agent_wire.framed import MAGIC, frame
from gpu_platform.testing.cluster_procs import ReplicatedCluster, wait_until
from tests.integration.test_gang_processes import RENDEZVOUS
from tests.integration.test_replicated_cluster import (
    running_cluster,
)
from tests.integration.test_replicated_cluster import (
    test_a_stopped_agent_s_jobs_run_elsewhere as stopped_agent_s_jobs_run_elsewhere,
)

WAIT = 90.0
pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ReplicatedCluster]:
    with running_cluster(tmp_path, {"GPU_PLATFORM_AGENT_TRANSPORT": "grpc"}) as c:
        yield c


def _state(c: ReplicatedCluster, job_id: str) -> str:
    return str(c.job(job_id)["state"])


def test_jobs_gangs_and_a_leader_kill_over_grpc_agent_streams(cluster: ReplicatedCluster) -> None:
    c = cluster
    lead = c.wait_leader()
    assert c.agents_connected(lead) == set(c.nodes)
    with socket.create_connection(("127.0.0.1", c.agent_ports[lead]), timeout=10) as sock:
        sock.sendall(MAGIC + frame(b"{}"))  # the agents' port is gRPC's: no framed answer
        assert sock.recv(len(MAGIC)) != MAGIC
    job = c.submit(["sh", "-c", "echo visible=$CUDA_VISIBLE_DEVICES"], gpus=2)
    assert wait_until(lambda: _state(c, job["id"]) == "COMPLETED", WAIT)
    logs = c.client.get(c.url(lead) + f"/v1/jobs/{job['id']}/logs")  # read from the agent
    assert logs.status_code == 200 and "visible=" in logs.text

    gang = c.submit([sys.executable, "-c", RENDEZVOUS], gpus=8, tasks=2)  # both agents
    assert wait_until(lambda: _state(c, gang["id"]) in ("COMPLETED", "FAILED"), WAIT)
    done = c.job(gang["id"])
    assert done["state"] == "COMPLETED", (done["reason"], done["allocation"])
    assert len({t["node"] for t in done["allocation"]["tasks"]}) == 2

    c.kill_server(lead)  # kill -9: the agents' streams break; they find the new leader
    new = c.wait_leader(among=[i for i in c.alive() if i != lead], timeout=WAIT)
    assert wait_until(lambda: c.agents_connected(new) == set(c.nodes), WAIT)
    after = c.submit(["true"], gpus=1)
    assert wait_until(lambda: _state(c, after["id"]) == "COMPLETED", WAIT)


def test_a_stopped_agent_s_job_is_fenced_and_runs_elsewhere(cluster: ReplicatedCluster) -> None:
    stopped_agent_s_jobs_run_elsewhere(cluster)  # test_replicated_cluster's, on gRPC streams
