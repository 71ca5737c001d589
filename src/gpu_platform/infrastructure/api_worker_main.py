"""One API worker process: `python -m gpu_platform.infrastructure.api_worker_main '<json>'`.

Started by `ApiWorkers` (api_workers.py), never by hand. The JSON names the public address,
the server's Unix sockets (gRPC, and the front link's for SubmitJob batches), TLS files, the
message bound, logging and the parent's pid. The worker prints `ready <port>` on stdout once it
listens, and ends on SIGTERM or SIGINT, or when its parent is gone.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from gpu_platform.adapters.grpc_bind import PortUnavailable, bind_port
from gpu_platform.adapters.inbound.grpc.front_worker import Batcher, WorkerHandler
from gpu_platform.adapters.outbound.cpu_affinity import unpin_self
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.infrastructure.logging import configure_logging

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """SIGTERM when the parent ends (Linux); then make sure it has not ended already."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the getppid poll below still ends it
        pass
    if os.getppid() != parent:
        raise SystemExit(0)


def _tls(spec: dict[str, Any]) -> grpc.ServerCredentials | None:
    if not spec.get("tls_cert"):
        return None
    ca = spec.get("tls_ca")
    files = TlsFiles(Path(spec["tls_cert"]), Path(spec["tls_key"]), Path(ca) if ca else None)
    return files.grpc_server_credentials()


def serve(spec: dict[str, Any], stopped: list[int]) -> None:
    """Serve until `stopped` (the signals received) is not empty or the parent is gone."""
    parent = int(spec["parent"])
    channel = grpc.insecure_channel(
        f"unix:{spec['socket']}",
        options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)],
    )
    grpc.channel_ready_future(channel).result(timeout=float(spec.get("connect_timeout_s", 30)))
    batcher = Batcher(spec["submit_socket"])
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=int(spec.get("threads", 32))),
        handlers=[WorkerHandler(channel, batcher)],
        options=[
            ("grpc.so_reuseport", 1),  # beside the siblings on one port
            ("grpc.max_receive_message_length", int(spec["max_message_bytes"])),
        ],
    )
    try:
        port = bind_port(server, spec["address"], "gRPC API worker", _tls(spec))
    except PortUnavailable as exc:
        print(f"error {exc}", flush=True)
        raise SystemExit(1) from None
    server.start()
    print(f"ready {port}", flush=True)
    while not stopped and os.getppid() == parent:
        time.sleep(0.2)  # a signal handler may not take a lock this thread could hold
    server.stop(2.0).wait()
    batcher.close()
    channel.close()


def main(argv: list[str]) -> None:
    unpin_self()  # not on the server's core when it has one (cpu_affinity)
    spec = json.loads(argv[1])
    configure_logging(spec.get("log_level", "info"), spec.get("log_format", "auto"))
    _die_with_parent(int(spec["parent"]))
    stopped: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):  # no Event.set here: it can deadlock
        signal.signal(sig, lambda signum, _frame: stopped.append(signum))
    serve(spec, stopped)


if __name__ == "__main__":
    main(sys.argv)
