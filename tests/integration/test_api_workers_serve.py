"""`serve` with `api_workers = 2`, the default one-voter Raft server as a user starts it:
ports.json names the port the workers share, submits and reads go through them, a SIGTERM
stops them with the server, and a SIGKILLed server takes them along (parent-death signal) and
starts again over the sockets it left."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.testing.api_workers import worker_pids
from gpu_platform.testing.ports import wait_for_ports
from tests.integration.conftest import ENTRY, Server


def _workers(server_pid: int) -> list[int]:
    return worker_pids(server_pid)


def _gone(pids: list[int], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(
            Path(f"/proc/{p}/cmdline").exists() and Path(f"/proc/{p}/cmdline").read_bytes()
            for p in pids
        ):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def served() -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="aws-") as tmp:  # a short Unix socket path
        server = Server(Path(tmp) / "d", {"GPU_PLATFORM_API_WORKERS": "2"})
        server.start()
        try:
            yield server
        finally:  # a graceful stop: it sweeps its jobs' cgroups (a killed one cannot)
            server.stop(signal.SIGTERM)


def test_serve_with_workers_answers_on_their_port_and_stops_them(served: Server) -> None:
    assert served.proc is not None
    workers = _workers(served.proc.pid)
    assert len(workers) == 2
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        jobs = pb_grpc.JobServiceStub(channel)
        job = jobs.SubmitJob(pb.SubmitJobRequest(command=["true"]), timeout=30)
        assert jobs.GetJob(pb.GetJobRequest(id=job.id), timeout=30).id == job.id
    served.stop(signal.SIGTERM)
    assert _gone(workers)


def test_a_killed_server_takes_its_workers_along(served: Server) -> None:
    assert served.proc is not None
    workers = _workers(served.proc.pid)
    assert len(workers) == 2
    os.kill(served.proc.pid, signal.SIGKILL)
    served.proc.wait(timeout=30)
    assert _gone(workers)
    served.start()  # over the killed run's sockets
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        jobs = pb_grpc.JobServiceStub(channel)
        assert jobs.SubmitJob(pb.SubmitJobRequest(command=["true"]), timeout=30).id


def test_the_flag_is_checked_and_a_bad_count_refused_in_one_line(tmp_path: Path) -> None:
    r = Server(tmp_path / "d").cli(
        "serve", "--api-workers", "65", "--data-dir", str(tmp_path / "d")
    )
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: configuration: api_workers: Input should be less than or equal to 64"
    ]


def test_the_flag_starts_that_many_workers() -> None:
    with tempfile.TemporaryDirectory(prefix="awf-") as tmp:
        server = Server(Path(tmp) / "d")
        proc = subprocess.Popen(
            [
                *ENTRY,
                "serve",
                "--port",
                "0",
                "--api-workers",
                "1",
                "--data-dir",
                str(server.data_dir),
            ],
            env=server.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_ports(server.data_dir, proc, timeout=60)
            assert len(_workers(proc.pid)) == 1
        finally:
            proc.terminate()
            proc.wait(timeout=30)
