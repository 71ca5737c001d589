"""Ports for servers that tests start, on a machine shared by pytest-xdist workers.

Picking a free port (bind port 0, close, hand the number over) races: between the close and
the server's bind another worker's process can take the port ("Address already in use").

- A server started alone binds port 0 itself and reports what it got: `gpu-platform serve`
  and `gpu-platform agent` in `<data_dir>/ports.json` (`wait_for_ports`), in-process servers
  in attributes (`GrpcServer.port`, `AgentGrpcServer.port`, `GrpcRaftTransport.bound_port`).
  Another program given port 0 (Prometheus) is asked the kernel: `wait_for_listening` finds
  the port its process listens on in /proc.
- Members of a cluster must know each other's addresses before any of them starts (Raft
  peers, agents dialling their servers, etcd, Slurm). For those, `reserve_port` hands out
  ports from a block of its own to each xdist worker (`PYTEST_XDIST_WORKER` gwN: block N),
  below the kernel's ephemeral range (`ip_local_port_range`), from which every port-0 bind
  and outgoing connection on the machine is served. No other worker and no port-0 bind can
  be handed the same number, so nothing needs retrying. We chose this over retrying a start
  whose bind failed: a Raft member that cannot bind would mean new peers for every member,
  and a retry loop in the fixture hides slow failures. Within a worker, ports are handed out
  in turn, skipping any that something on the machine holds; two separate pytest runs on one
  machine start at different places in their blocks (their pids), so they rarely meet.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from gpu_platform.infrastructure.bound_ports import read_ports

__all__ = ["listening_ports", "port_block", "reserve_port", "wait_for_listening", "wait_for_ports"]

#: Reserved blocks start here (below: well-known and common service ports).
FIRST_PORT = 10_000
#: Ports per xdist worker.
BLOCK_SIZE = 1_500

_lock = threading.Lock()
_handed_out = 0


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def port_block(worker: str | None = None) -> range:
    """The ports of xdist worker `worker` (default: this process's `PYTEST_XDIST_WORKER`;
    none, outside xdist: block 0)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    blocks = max(1, (_ephemeral_start() - FIRST_PORT) // BLOCK_SIZE)
    first = FIRST_PORT + (index % blocks) * BLOCK_SIZE
    return range(first, first + BLOCK_SIZE)


def _free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def reserve_port(host: str = "127.0.0.1") -> int:
    """A port of this worker's block that nothing holds now, for a server to bind later;
    not handed out again by this process until its whole block has been."""
    global _handed_out
    block = port_block()
    with _lock:
        for _ in range(len(block)):
            port = block[(os.getpid() + _handed_out) % len(block)]
            _handed_out += 1
            if _free(host, port):
                return port
    raise RuntimeError(f"no free port left in {block}")


def wait_for_ports(
    data_dir: Path, proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 60.0
) -> dict[str, int]:
    """The ports `proc` (a `serve` or `agent` on `data_dir`) reports once it listens. Raises
    RuntimeError if it exits or does not report within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        ports = read_ports(data_dir)
        if ports is not None and ports.get("pid") == proc.pid:
            return ports
        if proc.poll() is not None:
            raise RuntimeError(f"pid {proc.pid} exited ({proc.returncode}) before it listened")
        if time.monotonic() > deadline:
            raise RuntimeError(f"pid {proc.pid} wrote no {data_dir}/ports.json in {timeout} s")
        time.sleep(0.05)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on: its sockets' inodes among the listening
    entries (state 0A) of /proc/<pid>/net/tcp and tcp6."""
    inodes = set()
    with contextlib.suppress(FileNotFoundError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def wait_for_listening(
    proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 60.0
) -> int:
    """The one TCP port `proc` (started with a listen port of 0) listens on, once it does.
    Raises RuntimeError if it exits, listens on several ports, or none within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        ports = listening_ports(proc.pid)
        if len(ports) > 1:
            raise RuntimeError(f"pid {proc.pid} listens on several ports: {sorted(ports)}")
        if ports:
            return ports.pop()
        if proc.poll() is not None:
            raise RuntimeError(f"pid {proc.pid} exited ({proc.returncode}) before it listened")
        if time.monotonic() > deadline:
            raise RuntimeError(f"pid {proc.pid} listened on no port in {timeout} s")
        time.sleep(0.05)
