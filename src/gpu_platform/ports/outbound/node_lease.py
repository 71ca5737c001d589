"""Port: where a node agent keeps its lease from the leader (fencing, docs/replication.md).

An agent holds a lease while the leader acknowledges its heartbeats; each acknowledgement
renews it to end `agent_lease_seconds` after that heartbeat was *sent* (the leader heard the
node no earlier). Once the lease has ended, the implementation stops the node's tasks on its
own — even if the agent itself is stopped or hung — so the leader, which re-runs a lost node's
work only after `lease + grace + margin` by its own clock, never has two copies running.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["LEASE_ENDED", "NodeLease"]

#: How a launch refused because the node's lease has ended begins: the leader re-queues the
#: job (no fault of the job) rather than failing it.
LEASE_ENDED = "the node's lease from the leader has ended"


@runtime_checkable
class NodeLease(Protocol):
    """`renew(until)`: the lease now ends at `until`, a `time.monotonic()` reading (seconds);
    until the first renewal nothing is fenced. Thread-safe; never blocks for long."""

    def renew(self, until_monotonic: float) -> None: ...
