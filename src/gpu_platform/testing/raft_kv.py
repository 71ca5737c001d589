"""A replicated key-value store over `RaftNode` — a test and benchmark HARNESS, not a product.

One process is one Raft node: `SqliteRaftStorage` in `--data`, `TcpRaftTransport` (or
`GrpcRaftTransport` with `--transport grpc`; default: `$RAFT_KV_TRANSPORT`, else tcp) on its
`--peers` address, `KvStateMachine` as the state machine, and a tiny HTTP/JSON interface:

* `POST /put` `{"key": k, "value": v}` -> 200 `{"index": i}` once committed and applied here;
  421 `{"leader_id": id|null}` when this node is not the leader; 503 on timeout/stop.
* `GET /get?key=k` -> a linearizable read (ReadIndex on the leader): 200 `{"value": v|null}`.
* `GET /dump` -> this node's applied state (not linearizable): `{"applied": i, "kv": {...}}`.
* `GET /status` -> `RaftNodeStatus` as JSON.
* `POST /members` `{"id": n, "address": "host:port"}` -> 200 `{"voters": [...]}` once the
  change is applied here (leader only); `DELETE /members/{id}` likewise removes a member;
  409 while another change is pending, 422 naming the field when invalid.
* `POST /transfer` `{"to": n}` -> 202: asks the leader to hand over (watch `/status`).
* `POST /hold` `{"held": true|false}` -> 200: a testing seam that takes the state machine's
  lock on a thread and keeps it until told `false` (a long operation under the state lock).

`--join` starts a server for a running cluster: nothing bootstrapped, it waits to be added.

    python -m gpu_platform.testing.raft_kv --id 1 --data /tmp/n1 --http 8001 \
        --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003

SIGTERM stops the node cleanly; SIGKILL is what the crash tests use.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from gpu_platform.adapters.outbound.integrity import StorageError
from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport, parse_peers
from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.adapters.outbound.raft_tcp import TcpRaftTransport
from gpu_platform.application.raft_node import (
    InvalidMembershipChange,
    MembershipChangeInProgress,
    NotLeader,
    RaftNode,
    RaftNodeConfig,
    RaftNodeError,
)
from gpu_platform.domain.consensus import ConfState

__all__ = ["KvStateMachine", "main"]


class KvStateMachine:
    """`StateMachine` of a dict: commands are JSON `{"key", "value"}` puts; thread-safe reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.kv: dict[str, str] = {}
        self.applied = 0
        self._release = threading.Event()

    def apply(self, index: int, data: bytes) -> object:
        cmd = json.loads(data)
        with self._lock:
            self.kv[cmd["key"]] = cmd["value"]
            self.applied = index
        return index

    def snapshot(self) -> bytes:
        with self._lock:
            return json.dumps({"applied": self.applied, "kv": self.kv}).encode()

    def restore(self, data: bytes) -> None:
        doc: dict[str, Any] = json.loads(data) if data else {"applied": 0, "kv": {}}
        with self._lock:
            self.kv = dict(doc["kv"])
            self.applied = int(doc["applied"])

    def hold(self) -> None:
        """Take the state machine's lock on a thread of its own and keep it until `release`
        (a test's stand-in for a long operation under the state lock); returns once held."""
        held, self._release = threading.Event(), threading.Event()
        release = self._release

        def keep() -> None:
            with self._lock:
                held.set()
                release.wait()

        threading.Thread(target=keep, name="kv-hold", daemon=True).start()
        held.wait()

    def release(self) -> None:
        """Let go of the lock `hold` took (no-op when not held)."""
        self._release.set()

    def get(self, key: str) -> str | None:
        with self._lock:
            return self.kv.get(key)

    def dump(self) -> dict[str, Any]:
        with self._lock:
            return {"applied": self.applied, "kv": dict(self.kv)}


def _handler(node: RaftNode, sm: KvStateMachine, timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()  # no Nagle: a reply's header and body are two small writes
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _error(self, exc: BaseException) -> None:
            if isinstance(exc, NotLeader):
                self._reply(421, {"leader_id": exc.leader_id, "error": str(exc)})
            elif isinstance(exc, MembershipChangeInProgress):
                self._reply(409, {"error": str(exc)})
            elif isinstance(exc, InvalidMembershipChange):
                self._reply(422, {"error": str(exc)})
            else:
                self._reply(503, {"error": str(exc) or type(exc).__name__})

        def _json_ints(self, *fields: str) -> dict[str, Any] | None:
            """The request body as a JSON object whose `fields` are ints, or None (replied)."""
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                doc = json.loads(raw)
            except ValueError:
                self._reply(400, {"error": "body: not JSON"})
                return None
            if not isinstance(doc, dict):
                self._reply(400, {"error": "body: not a JSON object"})
                return None
            for f in fields:
                if not isinstance(doc.get(f), int) or isinstance(doc.get(f), bool):
                    self._reply(422, {"error": f"{f}: an integer is required"})
                    return None
            return doc

        def _membership(self, fut: Future[ConfState]) -> None:
            try:
                cs = fut.result(timeout=timeout)
            except (RaftNodeError, FutureTimeout) as exc:
                self._error(exc)
                return
            self._reply(200, {"voters": list(cs.voters), "learners": list(cs.learners)})

        def do_DELETE(self) -> None:
            path = urlparse(self.path).path
            head, _, ident = path.rpartition("/")
            if head != "/members":
                self._reply(404, {"error": "not found"})
                return
            if not ident.isdigit():
                self._reply(422, {"error": "id: an integer is required"})
                return
            self._membership(node.remove_voter(int(ident)))

        def do_POST(self) -> None:
            path = urlparse(self.path).path
            if path == "/members":
                doc = self._json_ints("id")
                if doc is not None:
                    address = doc.get("address")
                    if not isinstance(address, str):
                        self._reply(422, {"error": "address: a string HOST:PORT is required"})
                        return
                    self._membership(node.add_voter(doc["id"], address))
                return
            if path == "/transfer":
                doc = self._json_ints("to")
                if doc is not None:
                    if doc["to"] not in node.status().voters:
                        self._reply(422, {"error": f"to: node {doc['to']} is not a voter"})
                        return
                    node.transfer_leadership(doc["to"])
                    self._reply(202, {"to": doc["to"]})
                return
            if path == "/hold":  # testing seam: hold the state machine's lock, or let go
                doc = self._json_ints()
                if doc is not None:
                    sm.hold() if doc.get("held") is True else sm.release()
                    self._reply(200, {"held": doc.get("held") is True})
                return
            if path != "/put":
                self._reply(404, {"error": "not found"})
                return
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                index = node.propose(body).result(timeout=timeout)
            except (RaftNodeError, FutureTimeout) as exc:
                self._error(exc)
                return
            self._reply(200, {"index": index})

        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path == "/get":
                key = parse_qs(url.query).get("key", [""])[0]
                try:
                    node.read_index().result(timeout=timeout)
                except (RaftNodeError, FutureTimeout) as exc:
                    self._error(exc)
                    return
                self._reply(200, {"value": sm.get(key)})
            elif url.path == "/dump":
                self._reply(200, sm.dump())
            elif url.path == "/status":
                st = asdict(node.status())
                st["role"] = st["role"].value
                self._reply(200, st)
            else:
                self._reply(404, {"error": "not found"})

    return Handler


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--id", type=int, required=True)
    p.add_argument("--peers", required=True, help="1=host:port,2=host:port,...")
    p.add_argument("--data", required=True, help="directory for raft.db")
    p.add_argument("--http", type=int, required=True, help="HTTP port")
    p.add_argument("--http-host", default="127.0.0.1", help="HTTP address (netns tests: 0.0.0.0)")
    defaults = RaftNodeConfig(id=0, voters=())  # the server's defaults, unless told otherwise
    p.add_argument("--tick", type=float, default=defaults.tick_interval, help="seconds per tick")
    p.add_argument("--election-tick", type=int, default=defaults.election_tick)
    p.add_argument("--snapshot-entries", type=int, default=10_000)
    p.add_argument("--compact-keep", type=int, default=1_000)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds a request may wait")
    p.add_argument("--join", action="store_true", help="join a running cluster (bootstrap nothing)")
    p.add_argument(
        "--transport",
        choices=("grpc", "tcp"),
        default=os.environ.get("RAFT_KV_TRANSPORT", "tcp"),
        help="Raft transport between the nodes (default: $RAFT_KV_TRANSPORT, else tcp)",
    )
    args = p.parse_args(argv)

    peers = parse_peers(args.peers)
    try:
        storage = SqliteRaftStorage(Path(args.data) / "raft.db", identity={"member": args.id})
    except StorageError as exc:  # a damaged log: one line, like `serve`
        raise SystemExit(f"error: {exc}") from None
    sm = KvStateMachine()
    config = RaftNodeConfig(
        id=args.id,
        voters=tuple(sorted(peers)),
        tick_interval=args.tick,
        election_tick=args.election_tick,
        snapshot_entries=args.snapshot_entries,
        compact_keep=args.compact_keep,
        join=args.join,
    )
    transport = TcpRaftTransport if args.transport == "tcp" else GrpcRaftTransport
    node = RaftNode(config, storage, transport(args.id, peers), sm)
    node.start()
    http = ThreadingHTTPServer((args.http_host, args.http), _handler(node, sm, args.timeout))
    http.daemon_threads = True
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    threading.Thread(target=http.serve_forever, name="kv-http", daemon=True).start()
    print(f"raft_kv node {args.id} serving http://{args.http_host}:{args.http}", flush=True)
    done.wait()
    http.shutdown()
    node.stop()
    storage.close()


if __name__ == "__main__":
    main()
