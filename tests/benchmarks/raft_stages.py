"""Where one Raft commit's time goes: every stage time-stamped in all three processes.

    python tests/benchmarks/raft_stages.py [--transport tcp|grpc] [--commits 300] [--json]

The cluster of `bench_raft_peers` (node 1 in this process with the client, nodes 2 and 3
`raft_kv` processes, SQLite with an fsync per write on every node, the server's defaults), one
client committing sequentially. Hooks wrapped around the driver's methods (here and, through
`--follower`, in the follower processes; nothing in `src/` knows of them) note
`time.monotonic()` — CLOCK_MONOTONIC, one clock for every process on the machine — at each
stage of each log index; the table is the median of each gap over the commits, along the
path of the follower whose acknowledgement reached the leader first.

A negative gap means the stage came before the one above it (e.g. AppendEntries leave before
the leader's own write).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

_RECORDS: list[tuple[str, int, float]] = []


def _mark(stage: str, key: int) -> None:
    _RECORDS.append((stage, key, time.monotonic()))


def install() -> None:
    """Wrap the driver's and transports' methods with time stamps (this process only)."""
    from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport
    from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
    from gpu_platform.adapters.outbound.raft_tcp import TcpRaftTransport
    from gpu_platform.application import raft_loop, raft_proposals, raft_ready
    from gpu_platform.domain.consensus import MessageType
    from gpu_platform.testing.raft_kv import KvStateMachine

    app, ack = MessageType.APP, MessageType.APP_RESP
    loop_cls = raft_loop.RaftLoop
    handle = loop_cls._handle

    def _handle(self: Any, item: Any) -> bool:
        kind, arg, _ = item
        if kind == "msg":
            if arg.type is app and arg.entries:
                _mark("f.loop_took_app", arg.entries[-1].index)
            elif arg.type is ack and not arg.reject:
                _mark(f"l.loop_took_ack{arg.from_}", arg.index)
        elif kind == "propose":
            _mark("l.loop_took_prop", self.rawnode.raft.raft_log.last_index() + 1)
        return bool(handle(self, item))

    loop_cls._handle = _handle  # type: ignore[method-assign,assignment,unused-ignore]

    save = SqliteRaftStorage.save

    def _save(self: Any, hs: Any, entries: Any, snapshot: Any = None, sync: bool = True) -> None:
        key = entries[-1].index if entries else 0
        _mark("save_start", key)
        save(self, hs, entries, snapshot, sync)
        _mark("save_end", key)

    SqliteRaftStorage.save = _save  # type: ignore[method-assign,assignment,unused-ignore]

    hand_over = raft_ready.ReadyHandling._hand_over

    def _hand_over(self: Any, rd: Any) -> None:
        for e in rd.committed_entries:
            _mark("l.committed", e.index)
        hand_over(self, rd)

    raft_ready.ReadyHandling._hand_over = _hand_over  # type: ignore[method-assign,assignment,unused-ignore]

    resolve = raft_proposals.PendingProposals.resolve

    def _resolve(self: Any, index: int, *args: Any) -> float | None:
        out = resolve(self, index, *args)
        _mark("l.future_set", index)
        return out

    raft_proposals.PendingProposals.resolve = _resolve  # type: ignore[method-assign,assignment,unused-ignore]

    apply = KvStateMachine.apply

    def _apply(self: Any, index: int, data: bytes) -> object:
        _mark("applying", index)
        return apply(self, index, data)

    KvStateMachine.apply = _apply  # type: ignore[method-assign,assignment,unused-ignore]

    for cls in (TcpRaftTransport, GrpcRaftTransport):
        _wrap_transport(cls, app, ack)
    _wrap_tcp_reader(app, ack)


def _wrap_tcp_reader(app: Any, ack: Any) -> None:
    """On TCP: when a reader thread started to wait for a frame, and when the frame was read."""
    import threading

    from gpu_platform.adapters.outbound.raft_tcp import transport

    read_frame, decode_batch = transport.read_frame, transport.decode_batch
    local = threading.local()

    def _read_frame(f: Any) -> bytes:
        local.waiting = time.monotonic()
        return bytes(read_frame(f))

    def _decode_batch(body: bytes) -> Any:
        t = time.monotonic()
        out = decode_batch(body)
        for m in out[2]:
            if m.type is app and m.entries:
                key, who = m.entries[-1].index, "f.{}"
            elif m.type is ack and not m.reject:
                key, who = m.index, f"l.{{}}{m.from_}"
            else:
                continue
            _RECORDS.append((who.format("reader_waits"), key, getattr(local, "waiting", t)))
            _RECORDS.append((who.format("frame_read"), key, t))
        return out

    transport.read_frame, transport.decode_batch = _read_frame, _decode_batch


def _wrap_transport(cls: Any, app: Any, ack: Any) -> None:
    send, start = cls.send, cls.start

    def _send(self: Any, messages: Any) -> None:
        marks = []
        for m in messages:
            if m.type is app and m.entries:
                marks.append((f"l.send_app{m.to}", m.entries[-1].index))
            elif m.type is ack and not m.reject:
                marks.append(("f.send_ack", m.index))
        for stage, key in marks:
            _mark(stage + "_start", key)
        send(self, messages)
        for stage, key in marks:
            _mark(stage + "_end", key)

    def _start(self: Any, on_message: Any, *rest: Any) -> None:
        def received(m: Any) -> None:
            if m.type is app and m.entries:
                _mark("f.recv_app", m.entries[-1].index)
            elif m.type is ack and not m.reject:
                _mark(f"l.recv_ack{m.from_}", m.index)
            on_message(m)

        start(self, received, *rest)

    cls.send, cls.start = _send, _start


def _dump(path: str) -> None:
    Path(path).write_text(json.dumps(_RECORDS))


def follower(out: str, argv: list[str]) -> None:
    """A `raft_kv` node with the hooks; its records go to `out` when it stops (SIGTERM)."""
    install()
    atexit.register(_dump, out)
    from gpu_platform.testing.raft_kv import main

    main(argv)


def _by_index(records: list[list[Any]]) -> dict[int, dict[str, float]]:
    """index -> stage -> first time (the first time a stage is seen for that index)."""
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for stage, key, t in records:
        out[key].setdefault(stage, t)
    return out


def measure(transport: str, commits: int) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import httpx
    from bench_raft_peers import TRANSPORTS, _put, _status_ok, _wait

    from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
    from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
    from gpu_platform.domain.consensus import Role
    from gpu_platform.testing.ports import reserve_port
    from gpu_platform.testing.raft_kv import KvStateMachine

    install()
    root = Path(tempfile.mkdtemp(prefix="raft-stages-"))
    raft = {i: reserve_port() for i in (1, 2, 3)}
    http = {i: reserve_port() for i in (2, 3)}
    peers = ",".join(f"{i}=127.0.0.1:{p}" for i, p in raft.items())
    outs = {i: root / f"stages-{i}.json" for i in (2, 3)}
    procs = {
        i: subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--follower",
                str(outs[i]),
                "--",
                *("--id", str(i), "--peers", peers, "--data", str(root / f"n{i}")),
                *("--http", str(http[i]), "--transport", transport),
            ],
            stdout=subprocess.DEVNULL,
        )
        for i in (2, 3)
    }
    storage = SqliteRaftStorage(root / "n1" / "raft.db")
    node = RaftNode(
        RaftNodeConfig(id=1, voters=(1, 2, 3)),
        storage,
        TRANSPORTS[transport](1, {i: f"127.0.0.1:{p}" for i, p in raft.items()}),
        KvStateMachine(),
    )
    client = httpx.Client(timeout=2.0)
    sent: dict[int, tuple[float, float]] = {}
    try:
        node.start()
        for _ in range(40):
            if _wait(lambda: node.status().role is Role.LEADER, timeout=3):
                break
            node.transfer_leadership(1)
        else:
            raise RuntimeError("node 1 never became the leader")
        _wait(lambda: all(_status_ok(client, p) for p in http.values()))
        for i in range(50):  # warm up
            node.propose(_put(i)).result(timeout=30)
        load = os.getloadavg()[0]
        for i in range(commits):
            t0 = time.monotonic()
            index = node.propose(_put(i)).result(timeout=30)
            sent[int(index)] = (t0, time.monotonic())  # type: ignore[call-overload]
    finally:
        client.close()
        node.stop()
        storage.close()
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(timeout=30)
    leader = _by_index([list(r) for r in _RECORDS])
    followers = {i: _by_index(json.loads(outs[i].read_text())) for i in (2, 3)}
    shutil.rmtree(root, ignore_errors=True)
    return {"load": load, "table": _table(sent, leader, followers)}


# (label, process, stage): process "c" client, "l" leader, "f" the first-acking follower.
_PATH = (
    ("client: propose() called", "c", "send"),
    ("leader: Raft loop takes the proposal", "l", "l.loop_took_prop"),
    ("leader: AppendEntries send() starts", "l", "l.send_app{f}_start"),
    ("leader: AppendEntries send() returns", "l", "l.send_app{f}_end"),
    ("leader: own write + fsync starts", "l", "save_start"),
    ("follower: its reader waits for the frame", "f", "f.reader_waits"),
    ("follower: the frame is read off the socket", "f", "f.frame_read"),
    ("follower: transport hands the message over", "f", "f.recv_app"),
    ("follower: Raft loop takes it", "f", "f.loop_took_app"),
    ("follower: write + fsync starts", "f", "save_start"),
    ("follower: write + fsync ends", "f", "save_end"),
    ("follower: ack send() starts", "f", "f.send_ack_start"),
    ("follower: ack send() returns", "f", "f.send_ack_end"),
    ("leader: its reader waits for the frame", "l", "l.reader_waits{f}"),
    ("leader: the ack is read off the socket", "l", "l.frame_read{f}"),
    ("leader: transport hands the ack over", "l", "l.recv_ack{f}"),
    ("leader: Raft loop takes the ack", "l", "l.loop_took_ack{f}"),
    ("leader: own write + fsync ends", "l", "save_end"),
    ("leader: commit index advanced (hand over)", "l", "l.committed"),
    ("leader: applier applies it", "l", "applying"),
    ("leader: the client's future set", "l", "l.future_set"),
    ("client: result() returns", "c", "recv"),
)


def _table(
    sent: dict[int, tuple[float, float]],
    leader: dict[int, dict[str, float]],
    followers: dict[int, dict[int, dict[str, float]]],
) -> list[dict[str, Any]]:
    gaps: dict[str, list[float]] = defaultdict(list)
    for index, (t_send, t_recv) in sent.items():
        lead = leader.get(index, {})
        acks = {f: lead[f"l.recv_ack{f}"] for f in followers if f"l.recv_ack{f}" in lead}
        if not acks:
            continue
        f = min(acks, key=lambda k: acks[k])
        times: dict[str, float] = {}
        for label, proc, stage in _PATH:
            if proc == "c":
                times[label] = t_send if stage == "send" else t_recv
            else:
                src = lead if proc == "l" else followers[f].get(index, {})
                t = src.get(stage.format(f=f))
                if t is not None:
                    times[label] = t
        prev: float | None = None
        for label, _, _ in _PATH:
            if label in times:
                if prev is not None:
                    gaps[label].append((times[label] - prev) * 1e6)
                prev = times[label]
        gaps["total"].append((t_recv - t_send) * 1e6)
    return [
        {"stage": label, "p50_us": round(statistics.median(v), 1), "n": len(v)}
        for label, v in gaps.items()
    ]


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--follower":
        follower(sys.argv[2], sys.argv[4:])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transport", choices=("tcp", "grpc"), default="tcp")
    p.add_argument("--commits", type=int, default=300)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    out = measure(args.transport, args.commits)
    if args.json:
        print(json.dumps(out))
        return
    print(f"transport {args.transport}, {args.commits} commits, load {out['load']:.2f}")
    print(f"{'gap to the stage above (median)':<48} {'µs':>9}  n")
    for row in out["table"]:
        print(f"{row['stage']:<48} {row['p50_us']:>9.1f}  {row['n']}")


if __name__ == "__main__":
    main()
