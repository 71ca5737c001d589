"""Small hand-driven clusters of `Raft` peers for scenario tests (etcd-raft's `network`).

Messages are delivered synchronously until none is left (`send`), so a scenario reads as a
sequence of protocol steps. Peers can be cut, isolated or replaced by black holes (None).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable

from gpu_platform.domain.consensus.errors import ProposalDroppedError
from gpu_platform.domain.consensus.raft import Config, Raft
from gpu_platform.domain.consensus.storage import MemoryStorage
from gpu_platform.domain.consensus.types import (
    ConfState,
    Entry,
    HardState,
    Message,
    MessageType,
)

MT = MessageType


def storage_with(
    peers: Iterable[int],
    terms: Iterable[int] = (),
    *,
    learners: Iterable[int] = (),
    hard_state: HardState | None = None,
) -> MemoryStorage:
    """A storage whose log holds entries of `terms` at indexes 1, 2, ..."""
    s = MemoryStorage(ConfState(voters=tuple(sorted(peers)), learners=tuple(sorted(learners))))
    s.append([Entry(t, i + 1) for i, t in enumerate(terms)])
    if hard_state is not None:
        s.set_hard_state(hard_state)
    return s


def new_raft(
    node_id: int,
    peers: Iterable[int] = (1, 2, 3),
    terms: Iterable[int] = (),
    *,
    storage: MemoryStorage | None = None,
    seed: int = 0,
    **config: object,
) -> Raft:
    st = storage if storage is not None else storage_with(peers, terms)
    return Raft(Config(id=node_id, **config), st, random.Random(seed * 100 + node_id))  # type: ignore[arg-type]


def take(r: Raft) -> list[Message]:
    msgs, r.msgs = r.msgs, []
    return msgs


class Cluster:
    """Peers by id; a None peer swallows every message sent to it."""

    def __init__(self, peers: dict[int, Raft | None]) -> None:
        self.peers = peers
        self.cut: set[tuple[int, int]] = set()
        self.ignored: set[MessageType] = set()
        self.delivered: list[Message] = []

    @classmethod
    def of(cls, n: int, **config: object) -> Cluster:
        ids = list(range(1, n + 1))
        return cls({i: new_raft(i, ids, **config) for i in ids})

    def __getitem__(self, node_id: int) -> Raft:
        r = self.peers[node_id]
        assert r is not None
        return r

    def send(self, *msgs: Message) -> None:
        queue = list(msgs)
        while queue:
            m = queue.pop(0)
            if (m.from_, m.to) in self.cut or m.type in self.ignored:
                continue
            r = self.peers.get(m.to)
            if r is None:
                continue
            self.delivered.append(m)
            with contextlib.suppress(ProposalDroppedError):
                r.step(m)
            queue.extend(take(r))

    def flush(self) -> None:
        """Deliver whatever every peer has queued."""
        pending = [m for r in self.peers.values() if r is not None for m in take(r)]
        self.send(*pending)

    def hup(self, node_id: int) -> None:
        self.send(Message(MT.HUP, node_id, node_id))

    def propose(self, node_id: int, data: bytes = b"x") -> None:
        self.send(Message(MT.PROP, node_id, node_id, entries=(Entry(0, 0, data=data),)))

    def tick(self, node_id: int, n: int = 1) -> None:
        r = self[node_id]
        for _ in range(n):
            r.tick()
        self.flush()

    def isolate(self, node_id: int) -> None:
        for other in self.peers:
            if other != node_id:
                self.cut |= {(node_id, other), (other, node_id)}

    def partition(self, a: Iterable[int], b: Iterable[int]) -> None:
        for x in a:
            for y in b:
                self.cut |= {(x, y), (y, x)}

    def heal(self) -> None:
        self.cut.clear()
        self.ignored.clear()
