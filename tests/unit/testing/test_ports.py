"""`gpu_platform.testing.ports`: per-worker port blocks, and finding what a process listens on."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_platform.testing.ports import listening_ports, port_block, reserve_port, wait_for_listening


def test_each_xdist_worker_has_its_own_block_below_the_ephemeral_range() -> None:
    blocks = [port_block(f"gw{i}") for i in range(8)]
    assert all(set(a).isdisjoint(b) for i, a in enumerate(blocks) for b in blocks[i + 1 :])
    first = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(b.stop <= first for b in blocks)
    assert port_block("") == port_block("gw0")  # outside xdist: block 0


def test_reserved_ports_are_in_this_worker_s_block_distinct_and_skip_a_held_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    block = port_block()
    first = reserve_port()
    held = block[(block.index(first) + 1) % len(block)]  # the next one in turn
    with socket.socket() as s:
        s.bind(("127.0.0.1", held))
        s.listen()
        got = [reserve_port() for _ in range(5)]
    assert held not in got and len({first, *got}) == 6
    assert all(p in block for p in got)


def test_the_port_a_process_listens_on_is_found_in_proc() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        assert s.getsockname()[1] in listening_ports(os.getpid())
    code = "import socket, time; s = socket.create_server(('127.0.0.1', 0)); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        port = wait_for_listening(proc, timeout=30)
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
    finally:
        proc.kill()
        proc.wait(timeout=10)
