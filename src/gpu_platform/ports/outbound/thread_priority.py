"""`ThreadPriority`: the operating system's scheduling priority of the threads that keep a Raft
leader's leadership (issue 21: no elections while the cluster is loaded).

The Raft loop, the leader's heartbeat keeper and the transport's receiving thread call
`raise_current` on themselves as they start (or first deliver a message); an adapter decides
what "raised" means (`adapters.outbound.thread_priority`). The call never raises and never
blocks: a refusal by the OS (no privilege) is logged once by the adapter, and the thread runs
on at its normal priority. `NoThreadPriority`, the default, changes nothing.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["NoThreadPriority", "ThreadPriority"]


@runtime_checkable
class ThreadPriority(Protocol):
    """Raises the calling thread's scheduling priority. Thread-safe; never raises."""

    def raise_current(self, name: str) -> None:
        """The calling thread is `name` (e.g. "raft-1"; at most 15 characters are kept as the
        thread's OS name, for `top -H` and /proc)."""
        ...


class NoThreadPriority:
    """Leaves every thread as it is."""

    def raise_current(self, name: str) -> None:
        return None
