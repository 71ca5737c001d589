"""Read consistency of the current request: linearizable (the default) or stale-ok.

A follower refuses reads (the client is sent to the leader) unless the caller asked for a
possibly stale answer from this server's replica; inbound adapters set the flag per request
(REST header `X-Read-Consistency: stale`, gRPC metadata `gpu-platform-read-consistency`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["LeaderElsewhere", "stale_reads", "stale_reads_allowed"]


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


@contextmanager
def stale_reads(allowed: bool = True) -> Iterator[None]:
    """Within the block, reads may be served from this server's replica as it is."""
    token = _STALE.set(allowed)
    try:
        yield
    finally:
        _STALE.reset(token)


def stale_reads_allowed() -> bool:
    return _STALE.get()
