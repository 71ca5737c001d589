"""Faults over the real server and CLI with the simulated injector: XID 79 on a busy GPU takes
it offline and the job runs again on another GPU, visible in `jobs describe`; operator actions
are audited and survive a restart."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

from tests.integration.conftest import Server

SLEEPER = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"


def test_xid_79_on_a_busy_gpu_moves_its_job_to_another_gpu(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    r = server.cli("submit", "-q", "--gpus", "1", "--", sys.executable, "-c", SLEEPER)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    first = server.wait_job(job_id, lambda j: j["state"] == "RUNNING")
    node = first["allocation"]["node"]
    (gpu,) = first["allocation"]["gpu_indices"]

    r = server.cli("debug", "inject", f"xid 79 on gpu {gpu}", "--actor", "chaos-test")
    assert r.returncode == 0, r.stderr
    assert f"injected: xid 79 on gpu {gpu} node {node}" in r.stdout

    again = server.wait_job(job_id, lambda j: j["state"] == "RUNNING" and j["attempt"] == 2)
    assert gpu not in again["allocation"]["gpu_indices"]
    assert again["allocation"]["epoch"] > first["allocation"]["epoch"]

    described = server.cli("jobs", "describe", job_id)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert "State:          RUNNING" in lines
    assert "Attempt:        2" in lines
    assert "Faults:         1 of at most 3" in lines  # an XID 79 is a fault of the job's GPU
    assert any("QUEUED" in line and f"gpu {node}:{gpu}: xid 79 (reboot)" in line for line in lines)

    gpus = {g["index"]: g for g in server.get("/v1/gpus")}
    assert (gpus[gpu]["state"], gpus[gpu]["reason"]) == ("OFFLINE", "xid 79 (reboot)")
    table = server.cli("gpus").stdout
    assert "OFFLINE" in table and "xid 79 (reboot)" in table
    nodes = server.cli("nodes").stdout
    assert node in nodes and "READY" in nodes


def test_operator_actions_are_audited_refusals_explained_and_states_survive_a_restart(
    server_factory: Callable[..., Server],
) -> None:
    server = server_factory()
    job_id = server.cli("submit", "-q", "--gpus", "8", "--", sys.executable, "-c", SLEEPER)
    job_id_s = job_id.stdout.strip()
    running = server.wait_job(job_id_s, lambda j: j["state"] == "RUNNING")
    node = running["allocation"]["node"]

    refused = server.cli("offline", "--gpu", f"{node}:3", "--reason", "fan", "--actor", "ops")
    assert refused.returncode == 1
    assert "drain it, or offline with force" in refused.stderr

    r = server.cli("drain", "--gpu", f"{node}:3", "--reason", "fan noise", "--actor", "ops")
    assert r.returncode == 0 and f"gpu {node}:3 DRAINING" in r.stdout, r.stderr
    assert server.get(f"/v1/jobs/{job_id_s}")["state"] == "RUNNING"  # drain lets it run

    r = server.cli("offline", "--node", node, "--force", "--reason", "rack move", "--actor", "ops")
    assert r.returncode == 0 and f"node {node} DOWN" in r.stdout, r.stderr
    queued = server.wait_job(job_id_s, lambda j: j["state"] == "QUEUED" and j["attempt"] == 1)
    assert "offline --force by ops: rack move" in queued["reason"]

    audit = server.cli("audit").stdout
    assert "fan noise" in audit and "rack move" in audit and "refused" in audit

    assert server.stop(signal.SIGTERM) == 0
    again = server_factory(server.data_dir)
    gpus = {g["index"]: g["state"] for g in again.get("/v1/gpus")}
    assert gpus[3] == "DRAINING"
    assert again.get("/v1/nodes")[0]["state"] == "DOWN"
    assert again.get(f"/v1/jobs/{job_id_s}")["state"] == "QUEUED"  # nowhere to run

    r = again.cli("online", "--node", node, "--reason", "moved", "--actor", "ops")
    assert r.returncode == 0, r.stderr
    assert again.get("/v1/nodes")[0]["state"] == "READY"
    assert again.get(f"/v1/jobs/{job_id_s}")["state"] == "QUEUED"  # gpu 3 is still draining
    r = again.cli("online", "--gpu", f"{node}:3", "--reason", "fan replaced", "--actor", "ops")
    assert r.returncode == 0, r.stderr
    after = again.wait_job(job_id_s, lambda j: j["state"] == "RUNNING")
    assert after["attempt"] == 2
    assert [a["outcome"] for a in again.get("/v1/audit")] == [
        "refused: gpu " + f"{node}:3 runs job {job_id_s}: drain it, or offline with force to "
        "stop and re-queue the job",
        "ok",
        "ok",
        "ok",
        "ok",
    ]
