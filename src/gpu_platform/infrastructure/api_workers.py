"""API worker processes for `serve` (`api_workers = N`, docs/operations.md "API workers").

With N > 0 the server's gRPC API listens on its Unix socket (`<data_dir>/api.sock`) and N
worker processes serve the public gRPC port together (SO_REUSEPORT), batching SubmitJob calls
and relaying the rest (adapters/inbound/grpc/front_worker.py). The port stays this process's
for as long as it runs: a socket bound to it (not listening) holds it, so a worker that dies is
restarted on the same port. The workers end with the server.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import structlog

from gpu_platform.adapters.grpc_bind import PortUnavailable
from gpu_platform.infrastructure.config import Settings

__all__ = ["ApiWorkers", "api_socket", "submit_socket"]

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 30.0
SOCKET_NAME = "api.sock"
SUBMIT_SOCKET_NAME = "submit.sock"
_MAX_UNIX_PATH = 107


def api_socket(settings: Settings) -> Path:
    """Where the server's gRPC API listens for its workers; too long a path is refused."""
    return _unix_path(settings.data_dir.resolve() / SOCKET_NAME)


def submit_socket(settings: Settings) -> Path:
    """Where the server takes its workers' SubmitJob batches (the front link)."""
    return _unix_path(settings.data_dir.resolve() / SUBMIT_SOCKET_NAME)


def _unix_path(path: Path) -> Path:
    if len(os.fsencode(path)) > _MAX_UNIX_PATH:
        raise PortUnavailable(
            f"api_workers: the socket path {path} is longer than a Unix socket allows "
            f"({_MAX_UNIX_PATH} bytes); use a shorter data_dir"
        )
    return path


def _hold_port(host: str, port: int) -> socket.socket:
    """A socket bound to host:port with SO_REUSEPORT, not listening: it keeps the port (port
    0: one the kernel picks) for this process's workers, and takes no connection."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise PortUnavailable(f"gRPC API cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


class ApiWorkers:
    """Starts, watches and stops the worker processes of one server."""

    def __init__(self, settings: Settings, unix_socket: Path) -> None:
        self._settings = settings
        self._socket = unix_socket
        self._held: socket.socket | None = None
        self._procs: list[subprocess.Popen[bytes]] = []
        self._stopping = threading.Event()
        self._watch: threading.Thread | None = None
        self.port = 0

    def start(self) -> int:
        """Start every worker and wait until each listens; the public port."""
        s = self._settings
        self._held = _hold_port(s.host, s.grpc_port)
        self.port = int(self._held.getsockname()[1])
        try:
            self._procs = [self._spawn() for _ in range(s.api_workers)]
            for proc in self._procs:
                self._wait_ready(proc)
        except BaseException:
            self.stop()
            raise
        self._watch = threading.Thread(target=self._restart_loop, name="api-workers", daemon=True)
        self._watch.start()
        log.info("API workers listening", workers=len(self._procs), port=self.port)
        return self.port

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def stop(self) -> None:
        self._stopping.set()
        if self._watch is not None:
            self._watch.join(timeout=5)
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 10
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._held is not None:
            self._held.close()
            self._held = None

    def _spec(self) -> str:
        s = self._settings
        return json.dumps(
            {
                "parent": os.getpid(),
                "address": f"{s.host}:{self.port}",
                "socket": str(self._socket),
                "submit_socket": str(submit_socket(self._settings)),
                "max_message_bytes": s.max_request_bytes,
                "tls_cert": str(s.tls_cert_file or ""),
                "tls_key": str(s.tls_key_file or ""),
                "tls_ca": str(s.tls_client_ca_file or ""),
                "log_level": s.log_level,
                "log_format": s.log_format,
            }
        )

    def _spawn(self) -> subprocess.Popen[bytes]:
        entry = [sys.executable, "-m", "gpu_platform.infrastructure.api_worker_main"]
        return subprocess.Popen([*entry, self._spec()], stdout=subprocess.PIPE)

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if sel.select(START_TIMEOUT_S):
                line = proc.stdout.readline().decode(errors="replace").strip()
            else:
                line = f"error no answer in {START_TIMEOUT_S:.0f} s"
        if not line.startswith("ready"):
            why = line.removeprefix("error ").strip() or f"exited with {proc.poll()}"
            raise PortUnavailable(f"an API worker did not start: {why}")

    def _restart_loop(self) -> None:
        while not self._stopping.wait(1.0):
            for i, proc in enumerate(self._procs):
                if proc.poll() is None or self._stopping.is_set():
                    continue
                log.error("API worker exited; starting another", pid=proc.pid, code=proc.returncode)
                if proc.stdout is not None:
                    proc.stdout.close()
                fresh = self._spawn()
                self._procs[i] = fresh
                try:
                    self._wait_ready(fresh)
                except PortUnavailable as exc:
                    log.error("API worker restart failed", error=str(exc))
