"""A real `gpu-platform serve` process on loopback, and the real CLI against it."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_platform.testing.ports import wait_for_ports

BIN = Path(sys.executable).with_name("gpu-platform")
ENTRY = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "gpu_platform.main"]


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


_logs = itertools.count(1)


class Server:
    """`gpu-platform serve` on `data_dir`. Every port is 0 (any free one, so no other process
    can take it first): `start()` reads the ports it got from <data_dir>/ports.json into
    `port`/`url`, `grpc_port`, `raft_port` and `agent_port` (a restart may get new ones)."""

    def __init__(self, data_dir: Path, extra_env: dict[str, str] | None = None) -> None:
        self.data_dir, self.port, self.grpc_port = data_dir, 0, 0
        self.raft_port = self.agent_port = 0
        self.url = "http://127.0.0.1:0"  # until started
        self.env = dict(
            os.environ,
            GPU_PLATFORM_LOG_FORMAT="json",
            GPU_PLATFORM_STOP_GRACE_SECONDS="3",
            GPU_PLATFORM_GRPC_PORT="0",
            GPU_PLATFORM_RAFT_PORT="0",  # a one-voter cluster: any free Raft port
            GPU_PLATFORM_AGENT_PORT="0",  # and its in-process agent's stream port
        )
        self.env.update(extra_env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / f"server-{data_dir.name}-{next(_logs)}.log"

    def start(self, timeout: float = 60.0) -> Server:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*ENTRY, "serve", "--port", "0", "--data-dir", str(self.data_dir)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:  # a loaded 2-core CI machine is slow
            ports = wait_for_ports(self.data_dir, self.proc, timeout)
        except RuntimeError as exc:
            self.stop(signal.SIGKILL)
            raise AssertionError(
                f"server did not come up ({exc}):\n{self.log.read_text()}"
            ) from None
        self.port, self.grpc_port = ports["rest"], ports.get("grpc", 0)
        self.raft_port, self.agent_port = ports.get("raft", 0), ports.get("agent", 0)
        self.url = f"http://127.0.0.1:{self.port}"
        if not wait_for(self.healthy, timeout):
            self.stop(signal.SIGKILL)
            raise AssertionError(f"server did not come up:\n{self.log.read_text()}")
        return self

    def healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            return False
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)

    def get(self, path: str) -> Any:
        return httpx.get(f"{self.url}{path}", timeout=10).json()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(self.env, GPU_PLATFORM_SERVER=self.url)
        return subprocess.run(
            [*ENTRY, *args], check=False, env=env, capture_output=True, text=True, timeout=60
        )

    def wait_job(self, job_id: str, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        last: dict[str, Any] = {}

        def check() -> bool:
            nonlocal last
            last = self.get(f"/v1/jobs/{job_id}")
            return pred(last)

        assert wait_for(check), f"job never matched: {json.dumps(last, indent=1)}"
        return last


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def make(data_dir: Path | None = None, **env: str) -> Server:
        server = Server(data_dir or tmp_path / "data", env)
        started.append(server)
        return server.start()

    yield make
    for server in started:  # gracefully: its jobs stop and their cgroups go (tests/conftest.py)
        if server.proc is not None and server.proc.poll() is None:
            try:
                server.stop(signal.SIGTERM)
            except subprocess.TimeoutExpired:
                server.stop(signal.SIGKILL)
