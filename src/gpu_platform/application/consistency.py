"""Read consistency of the current request: linearizable (the default) or stale-ok.

Each request (the REST middleware, the gRPC call wrapper) starts in a fresh `stale_reads`
block; its first linearizable read waits on Raft's ReadIndex, later reads reuse that barrier.

A follower refuses reads (the client is sent to the leader) unless the caller asked for a
possibly stale answer from this server's replica; inbound adapters set the flag per request
(REST header `X-Read-Consistency: stale`, gRPC metadata `gpu-platform-read-consistency`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = [
    "LeaderElsewhere",
    "barrier_passed",
    "mark_barrier_passed",
    "stale_reads",
    "stale_reads_allowed",
]


class LeaderElsewhere(Exception):
    """This server cannot serve the request: it does not lead the cluster. `http_url` and
    `grpc_address` say where the leader's APIs are ('' when no leader is known yet)."""

    def __init__(self, leader_id: int | None, http_url: str = "", grpc_address: str = ""):
        self.leader_id = leader_id
        self.http_url = http_url
        self.grpc_address = grpc_address
        where = f"server {leader_id} at {http_url or grpc_address or '?'}" if leader_id else None
        super().__init__(f"not the leader; the leader is {where or 'not known yet'}")


_STALE: ContextVar[bool] = ContextVar("gpu_platform_stale_reads", default=False)
_BARRIER: ContextVar[bool] = ContextVar("gpu_platform_read_barrier", default=False)


@contextmanager
def stale_reads(allowed: bool = True) -> Iterator[None]:
    """Within the block, reads may be served from this server's replica as it is."""
    token = _STALE.set(allowed)
    fresh = _BARRIER.set(False)
    try:
        yield
    finally:
        _BARRIER.reset(fresh)
        _STALE.reset(token)


def stale_reads_allowed() -> bool:
    return _STALE.get()


def barrier_passed() -> bool:
    """True once this request has passed a linearizable read barrier: one ReadIndex per
    request is enough (every later read in it is at least as fresh)."""
    return _BARRIER.get()


def mark_barrier_passed() -> None:
    _BARRIER.set(True)
