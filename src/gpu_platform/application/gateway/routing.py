"""Which replica of a model takes the next request.

Theory of operation: a request may go to a replica that is ready, not draining, not already
tried for this request, and not *ejected* (it refused a connection in the last `eject_s`
seconds: passive health checking, so a dead replica the serving side still lists costs one
retry, not one per request). With a session key the replica is chosen by rendezvous hashing
(highest `blake2b(session, replica_id)`), so one session keeps landing on the replica that holds
its KV cache, and moves only when that replica goes; every gateway process agrees. Without one
the replica with the fewest outstanding requests wins, ties going round-robin. If every
candidate is ejected, the ejected ones are tried anyway: a guess beats a refusal.

Not thread-safe: one event loop owns a balancer. Time is passed in (`now`, seconds).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

from gpu_platform.ports.inbound.model_routes import ModelRoute, ReplicaAddress

__all__ = ["ReplicaBalancer", "affinity_score"]


def affinity_score(session: bytes, replica_id: str) -> int:
    """Rendezvous weight of `replica_id` for `session`: stable across processes."""
    digest = hashlib.blake2b(session + b"\0" + replica_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class ReplicaBalancer:
    """Chooses replicas and counts the requests outstanding on each (by replica id)."""

    def __init__(self, eject_s: float = 2.0) -> None:
        self.eject_s = eject_s
        self._outstanding: dict[str, int] = {}
        self._ejected: dict[str, float] = {}  # replica id -> until when
        self._turn = 0

    def choose(
        self,
        route: ModelRoute,
        now: float,
        session: bytes | None = None,
        exclude: Collection[str] = (),
    ) -> ReplicaAddress | None:
        """The replica for the next request of `route`, or None if none may take it."""
        fresh: list[ReplicaAddress] = []
        ejected: list[ReplicaAddress] = []
        for replica in route.replicas:
            if not replica.ready or replica.draining or replica.replica_id in exclude:
                continue
            until = self._ejected.get(replica.replica_id)
            if until is not None and until > now:
                ejected.append(replica)
            else:
                fresh.append(replica)
        candidates = fresh or ejected
        if not candidates:
            return None
        if session is not None:
            return max(candidates, key=lambda r: affinity_score(session, r.replica_id))
        self._turn += 1
        start = self._turn % len(candidates)
        best, fewest = candidates[start], self._outstanding.get(candidates[start].replica_id, 0)
        for i in range(1, len(candidates)):
            replica = candidates[(start + i) % len(candidates)]
            load = self._outstanding.get(replica.replica_id, 0)
            if load < fewest:
                best, fewest = replica, load
        return best

    def started(self, replica_id: str) -> None:
        self._outstanding[replica_id] = self._outstanding.get(replica_id, 0) + 1

    def finished(self, replica_id: str) -> None:
        left = self._outstanding.get(replica_id, 0) - 1
        if left > 0:
            self._outstanding[replica_id] = left
        else:
            self._outstanding.pop(replica_id, None)

    def refused(self, replica_id: str, now: float) -> None:
        """`replica_id` refused a connection: prefer others for `eject_s` seconds."""
        self._ejected[replica_id] = now + self.eject_s
        if len(self._ejected) > 1024:  # forget long-gone replicas
            self._ejected = {k: t for k, t in self._ejected.items() if t > now}

    def answered(self, replica_id: str) -> None:
        """`replica_id` answered: it is no longer ejected."""
        self._ejected.pop(replica_id, None)

    def outstanding(self, replica_id: str) -> int:
        return self._outstanding.get(replica_id, 0)

    def check_invariants(self) -> None:
        assert all(n > 0 for n in self._outstanding.values()), self._outstanding
