"""Where `serve` and `agent` listen once bound: `<data_dir>/ports.json` and one log line.

A port set to 0 means "any free port": the server binds port 0 itself and the kernel picks
one, so no other process can take the port between choosing it and binding it (as it can
when a caller picks a free port and hands it over). Whoever started the server learns the
ports it got from

- one log line, event `listening`, with a field per port (`rest=43127 grpc=40771 ...`);
- `<data_dir>/ports.json`, e.g. `{"pid": 4711, "rest": 43127, "grpc": 40771, "agent": 38211,
  "raft": 45609}` (an agent: `{"pid": ..., "metrics": ...}`), written atomically (a
  temporary file renamed over it) once every port listens, and removed on a clean stop.
  `pid` tells this run's file from one an earlier, killed run of the data dir left.

`serve` binds a REST port of 0 before it builds anything else, so the address it announces
to the cluster carries the real port; `ReportingServer` writes the file once uvicorn accepts.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import uvicorn

if TYPE_CHECKING:
    from gpu_platform.infrastructure.config import Settings
    from gpu_platform.infrastructure.container import Container

__all__ = [
    "PORTS_FILE",
    "ReportingServer",
    "bind_any_port",
    "bind_rest_port",
    "forget_ports",
    "read_ports",
    "report_ports",
    "serve_ports",
]

PORTS_FILE = "ports.json"

log = structlog.get_logger("gpu_platform.ports")


def bind_any_port(host: str) -> socket.socket:
    """A TCP socket bound to `host` on a port the kernel picks (not yet listening)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def bind_rest_port(settings: Settings) -> tuple[Settings, socket.socket | None]:
    """With `port = 0`, bind the REST port now: `settings` with the port the kernel picked
    (the address the server announces carries it) and the socket for uvicorn; else
    `settings` unchanged and None (uvicorn binds `port`)."""
    if settings.port != 0:
        return settings, None
    sock = bind_any_port(settings.host)
    return settings.model_copy(update={"port": sock.getsockname()[1]}), sock


def serve_ports(settings: Settings, container: Container) -> dict[str, int]:
    """The ports a started `serve` listens on: REST (`settings.port`, bound by now), and
    gRPC, the agents' API and Raft when it runs them."""
    ports = {"rest": settings.port}
    grpc_server = container.grpc_server()
    if grpc_server is not None:
        ports["grpc"] = grpc_server.port
    agent_server = container.agent_server()
    if agent_server is not None:
        ports["agent"] = agent_server.port
    replication = container.replication()
    if replication is not None:
        ports["raft"] = int(getattr(replication.node.transport, "bound_port", 0))
    gateway = container.gateway_server()  # with gateway_port, started before REST
    if gateway is not None:
        ports["gateway"] = gateway.port
    return ports


def report_ports(data_dir: Path, ports: Mapping[str, int]) -> Path:
    """Log `listening` with `ports` and write them, with this pid, to `data_dir/ports.json`
    (atomically: readers see the old file or the whole new one). Returns the file."""
    log.info("listening", **ports)
    path = data_dir / PORTS_FILE
    fd, tmp = tempfile.mkstemp(dir=data_dir, prefix=".ports-", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            json.dump({"pid": os.getpid(), **ports}, out)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def forget_ports(data_dir: Path) -> None:
    """Remove this process's `ports.json` (a clean stop); another process's stays."""
    ports = read_ports(data_dir)
    if ports is not None and ports.get("pid") == os.getpid():
        (data_dir / PORTS_FILE).unlink(missing_ok=True)


def read_ports(data_dir: Path) -> dict[str, int] | None:
    """The ports in `data_dir/ports.json` (with the writer's `pid`); None when there is no
    such file (or it is not one of ours: not a JSON object of numbers)."""
    try:
        data: Any = json.loads((data_dir / PORTS_FILE).read_text())
        return {str(k): int(v) for k, v in data.items()}
    except (FileNotFoundError, ValueError, TypeError, AttributeError):
        return None


class ReportingServer(uvicorn.Server):
    """A uvicorn server that calls `on_listening()` once it accepts connections."""

    def __init__(self, config: uvicorn.Config, on_listening: Callable[[], object]) -> None:
        super().__init__(config)
        self._on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._on_listening()
