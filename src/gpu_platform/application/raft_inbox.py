"""`Inbox`: the Raft loop's queue of work, and the lock whose holder runs the loop.

Theory of operation. Everything that touches the `RawNode` runs under `Inbox.lock` (the *loop
lock*). Any thread may `put` an item (a received message, a proposal, a report, stop): it is
appended and the Raft loop's own thread is woken. Items are taken (`take`) only by the
lock's holder, so they are handled in the order they were put, by one thread at a time.

A transport whose receiving threads may block (`TcpRaftTransport`: one reader thread per
peer) hands its messages to `offer` instead: when the loop lock is free, the caller gets it
and runs the loop's work itself — takes what is queued (its own message last), steps the
core, persists and sends — so a message crosses no thread between the socket and the core
(each hand-off between Python threads costs 50-150 µs of wake-up and GIL transfer). When the
lock is held, the item waits in the queue and the loop's thread is woken, exactly as `put`.
A caller that must never block (an asyncio thread, a client's proposal) uses `put`.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from typing import Generic, TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(Generic[T]):
    """Items put by any thread, taken in order by the holder of `lock` (see module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # the loop lock: its holder runs the Raft loop's work
        self._items: collections.deque[T] = collections.deque()
        # A binary semaphore: released = "look"; the loop's thread takes it in `wait`. A bare
        # lock wakes its waiter in C, as `queue.SimpleQueue` does; `threading.Event` makes
        # the woken thread take a Python condition's lock again (one more wake-up).
        self._signal = threading.Lock()
        self._signal.acquire()

    def put(self, item: T) -> None:
        """Queue `item` and wake the loop's thread; never blocks."""
        self._items.append(item)
        self.wake()

    def queue(self, item: T) -> None:
        """Queue `item` without waking the loop's thread: the caller runs the loop's work
        next or wakes it (`RaftNode.drive`)."""
        self._items.append(item)

    def offer(self, item: T) -> bool:
        """Queue `item`; True when the caller now holds `lock` and must run the loop's work
        (then release it); False when the loop's thread was woken instead. Never blocks."""
        self._items.append(item)
        if self.lock.acquire(blocking=False):
            return True
        self.wake()
        return False

    def wake(self) -> None:
        """Wake the loop's thread (it then takes the lock and looks)."""
        with contextlib.suppress(RuntimeError):  # released already: it will look anyway
            self._signal.release()

    def wait(self, timeout: float) -> None:
        """On the loop's thread, without the lock: until something was put or woken, or
        `timeout` seconds. Taking the signal resets it before the caller looks: an item put
        from then on releases it again."""
        if timeout > 0:
            self._signal.acquire(timeout=timeout)
        else:
            self._signal.acquire(blocking=False)

    def take(self) -> T | None:
        """The oldest item, or None when empty (only under `lock`)."""
        try:
            return self._items.popleft()
        except IndexError:
            return None

    def __len__(self) -> int:
        return len(self._items)
