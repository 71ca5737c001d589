"""In-memory fakes of the Raft ports: `InMemoryRaftStorage` and `InMemoryRaftHub`.

`InMemoryRaftStorage` is the core's `MemoryStorage` with the port's `save`/`close`; "durable"
means it survives as long as the object does (a test "restarts" a node by handing the same
object to a new `RaftNode`). `InMemoryRaftHub` connects `InMemoryRaftTransport`s in one
process: `send` enqueues, a delivery thread calls the receiver's handler; links can be cut
(`isolate`/`heal`), and messages over a cut link are dropped and reported as unreachable.
A transport's address book is every transport of its hub (`memory:ID`) until `add_peer` /
`remove_peer` edit it, as conf changes do; messages to a removed peer are dropped.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping, Sequence

from gpu_platform.domain.consensus import (
    ConfState,
    Entry,
    HardState,
    MemoryStorage,
    Message,
    MessageType,
    Snapshot,
)
from gpu_platform.ports.outbound.raft import MessageHandler, SnapshotReport, UnreachableHandler

__all__ = ["HeldRaftStorage", "InMemoryRaftHub", "InMemoryRaftStorage", "InMemoryRaftTransport"]


class InMemoryRaftStorage(MemoryStorage):
    """`MemoryStorage` plus the `RaftStorage` write API (`save`, `close`)."""

    def __init__(self, conf_state: ConfState | None = None) -> None:
        super().__init__(conf_state)
        self.saves = 0

    def save(
        self,
        hard_state: HardState | None,
        entries: Sequence[Entry],
        snapshot: Snapshot | None = None,
        sync: bool = True,
    ) -> None:
        if snapshot is not None:
            self.apply_snapshot(snapshot)
        self.append(entries)
        if hard_state is not None:
            self.set_hard_state(hard_state)
        self.saves += 1

    def close(self) -> None:
        """Nothing to release."""


class HeldRaftStorage(InMemoryRaftStorage):
    """For tests of a Raft loop stuck in its disk: once `hold` is set, the write carrying an
    entry `hold_on` signals `entered` and waits (up to `wait_s`) for `release`; `broken` fails
    every write; `writes` counts the entries of each write that had any."""

    def __init__(self, hold_on: bytes = b"first", wait_s: float = 30.0) -> None:
        super().__init__()
        self.hold_on = hold_on
        self.wait_s = wait_s
        self.writes: list[int] = []
        self.broken = False
        self.hold = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def save(
        self,
        hard_state: HardState | None,
        entries: Sequence[Entry],
        snapshot: Snapshot | None = None,
        sync: bool = True,
    ) -> None:
        if self.broken:
            raise OSError("disk gone")
        if self.hold and any(e.data == self.hold_on for e in entries):
            self.entered.set()  # the Raft loop is now inside this write
            if not self.release.wait(self.wait_s):
                raise TimeoutError("HeldRaftStorage: never released")
        if entries:
            self.writes.append(len(entries))
        super().save(hard_state, entries, snapshot, sync)


class InMemoryRaftHub:
    """Routes messages between in-process transports on one delivery thread."""

    def __init__(self) -> None:
        self._transports: dict[int, InMemoryRaftTransport] = {}
        self._cut: set[int] = set()
        self._q: queue.SimpleQueue[tuple[Message, InMemoryRaftTransport] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="raft-hub", daemon=True)
        self._thread.start()

    def transport(self, node_id: int) -> InMemoryRaftTransport:
        t = InMemoryRaftTransport(self, node_id)
        self._transports[node_id] = t
        return t

    def isolate(self, node_id: int) -> None:
        with self._lock:
            self._cut.add(node_id)

    def heal(self) -> None:
        with self._lock:
            self._cut.clear()

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(timeout=5)

    def _post(self, m: Message, sender: InMemoryRaftTransport) -> None:
        self._q.put((m, sender))

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            m, sender = item
            with self._lock:
                cut = m.from_ in self._cut or m.to in self._cut
            dest = self._transports.get(m.to)
            ok = not cut and dest is not None and dest.deliver(m)
            if not ok:
                sender.report_unreachable(m.to)
            if m.type is MessageType.SNAP:
                sender.report_snapshot(m.to, ok)


class InMemoryRaftTransport:
    """A `RaftTransport` over an `InMemoryRaftHub`."""

    def __init__(self, hub: InMemoryRaftHub, node_id: int) -> None:
        self._hub = hub
        self.id = node_id
        self._on_message: MessageHandler | None = None
        self._on_unreachable: UnreachableHandler | None = None
        self._on_snapshot: SnapshotReport | None = None
        self.sent = 0
        self.dropped = 0
        self._added: dict[int, str] = {}
        self._removed: set[int] = set()

    @property
    def addresses(self) -> Mapping[int, str]:
        book = {i: f"memory:{i}" for i in self._hub._transports if i not in self._removed}
        book.update(self._added)
        return book

    def add_peer(self, node_id: int, address: str) -> None:
        self._removed.discard(node_id)
        self._added = {**self._added, node_id: address}

    def remove_peer(self, node_id: int) -> None:
        if node_id == self.id:
            return
        self._removed = {*self._removed, node_id}
        self._added = {i: a for i, a in self._added.items() if i != node_id}

    def start(
        self,
        on_message: MessageHandler,
        on_unreachable: UnreachableHandler,
        on_snapshot: SnapshotReport,
    ) -> None:
        self._on_message = on_message
        self._on_unreachable = on_unreachable
        self._on_snapshot = on_snapshot

    def send(self, messages: Sequence[Message]) -> None:
        removed = self._removed
        for m in messages:
            if m.to in removed:
                self.dropped += 1
                continue
            self.sent += 1
            self._hub._post(m, self)

    def stop(self) -> None:
        self._on_message = None

    def deliver(self, m: Message) -> bool:
        handler = self._on_message
        if handler is None:
            return False
        handler(m)
        return True

    def report_unreachable(self, peer: int) -> None:
        if self._on_unreachable is not None:
            self._on_unreachable(peer)

    def report_snapshot(self, peer: int, ok: bool) -> None:
        if self._on_snapshot is not None:
            self._on_snapshot(peer, ok)
