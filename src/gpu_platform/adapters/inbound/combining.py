"""Calls from many threads, run in batches by the callers themselves (issue 21).

The gRPC server answers each call on a thread of its own. `Combining.call(fn)` queues `fn`; a
caller that finds a lane free runs everything queued as one batch (`together.run_together`:
one group commit) on its own thread, then hands the lane to a queued caller, if any, and
returns its own result. The others wait for theirs. A lone call runs at once on its own thread,
so it costs no thread hop; under load each batch is one hand-over and one wake-up per call,
where a call that committed on its own woke and waited for the log's threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from gpu_platform.adapters.inbound.together import run_together
from gpu_platform.application.control.commands import settling

__all__ = ["Combining"]

T = TypeVar("T")


class _Slot:
    __slots__ = ("fn", "lead", "outcome", "settled", "woken")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.outcome: Any = None
        self.settled = False
        self.lead = False
        self.woken = threading.Event()


class Combining:
    def __init__(self, lanes: int = 2, most: int = 256) -> None:
        self._lock = threading.Lock()
        self._queued: list[_Slot] = []
        self._lanes = lanes
        self._free = lanes
        self._most = most
        self.batches = 0  # batches run (for tests and profiles)

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()`'s result; its exception raised here. A call already inside a batch on this
        thread (an API worker's item) runs at once: it is batched already, and waiting here
        would block the batch it belongs to."""
        if settling() is not None:
            return fn()
        slot = _Slot(fn)
        with self._lock:
            self._queued.append(slot)
            slot.lead = self._free > 0
            if slot.lead:
                self._free -= 1
        while not slot.lead:
            slot.woken.wait()
            slot.woken.clear()
            if slot.settled:
                return cast(T, _result(slot))
        self._lead(slot)
        return cast(T, _result(slot))

    def _lead(self, mine: _Slot) -> None:
        """Run batches, this caller's first, then hand the lane on."""
        with self._lock:  # never a caller handed a lane of its own: it runs its own batch
            batch: list[_Slot] = [mine]
            left: list[_Slot] = []
            for slot in self._queued:
                if slot is not mine:
                    taken = not slot.lead and len(batch) < self._most
                    (batch if taken else left).append(slot)
            self._queued = left
            self.batches += 1
        try:
            outcomes: list[Any] = run_together([s.fn for s in batch])
        except BaseException as exc:  # the batch failed whole: each of its callers gets it
            outcomes = [exc] * len(batch)
        for slot, outcome in zip(batch, outcomes, strict=True):
            slot.outcome, slot.settled = outcome, True
            if slot is not mine:
                slot.woken.set()
        with self._lock:  # the first queued caller not already handed a lane
            heir = next((s for s in self._queued if not s.lead), None)
            if heir is None:
                self._free += 1
            else:
                heir.lead = True
        if heir is not None:
            heir.woken.set()


def _result(slot: _Slot) -> Any:
    if isinstance(slot.outcome, BaseException):
        raise slot.outcome
    return slot.outcome
