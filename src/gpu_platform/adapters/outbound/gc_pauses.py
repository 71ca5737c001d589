"""Short garbage-collector pauses in the long-running server (issue 21: no elections under load).

Theory of operation. CPython's cyclic garbage collector stops every thread of the process (it
holds the GIL) while it runs, and a full (generation 2) collection walks every tracked
object. A server has ~0.5-1 million of them before it serves a request (gRPC, pydantic,
FastAPI, the codecs: modules, classes, functions), none of which will ever be garbage.
Measured on a 3-server cluster at load 8-15 (2 cores): every full collection took 83-102 ms
of CPU, on whichever thread happened to allocate (the main thread, the scheduler, the agent
service), stretched to 170-330 ms of wall time by the other processes on the machine; the
Raft loop and the heartbeat keeper, even under a real-time policy, waited for the GIL that
long, and the followers, silent past their 150-300 ms election timeout, elected another
leader (docs/performance.md, "Elections during the throughput run").

`freeze_startup_heap()` collects once, then moves every object alive at that point into the
permanent generation (`gc.freeze()`), which later collections skip: a full collection then
walks only what the server made since (its jobs, nodes, requests). What it costs: a cycle of
objects frozen now that becomes garbage later is never collected (objects without cycles are
still freed by reference counting); the server's startup objects live as long as it does.

`CollectionWatch` times every full collection (`gc.callbacks`) and logs a warning for one
longer than `warn_ms`. After one longer than `refreeze_ms` it freezes the heap again: the
server's state (jobs, nodes) is long-lived too, and it grows. Measured on 3 servers at
100,000 jobs (2 vCPUs): full collections took 300-855 ms each, collected nothing, came every
1-2 s while the state grew, and nearly every Raft tick more than 300 ms late was one of them
(docs/performance.md, "A large state"). Right after a full collection, everything still alive
survived it; frozen, later collections walk only what came after. What it costs is the same
as at startup: a cycle among frozen objects that becomes garbage later is not collected (the
state's jobs and nodes are frozen dataclasses and tuples, freed by reference counting).
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

__all__ = ["CollectionWatch", "freeze_startup_heap"]

log = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect, then exempt every object alive now from later collections; returns how many
    objects are frozen in all (`gc.get_freeze_count()`)."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("garbage collector: %d startup objects frozen (not walked again)", frozen)
    return frozen


class CollectionWatch:
    """Times full (generation 2) collections; logs each one longer than `warn_ms`, and
    freezes the heap after each one longer than `refreeze_ms` (module docstring)."""

    def __init__(self, warn_ms: float = 50.0, refreeze_ms: float | None = 100.0) -> None:
        self.warn_ms = warn_ms
        self.refreeze_ms = refreeze_ms  # None: never freeze again
        self.full = 0  # full collections seen
        self.refreezes = 0
        self.longest_ms = 0.0
        self._t0: float | None = None

    def start(self) -> CollectionWatch:
        gc.callbacks.append(self._on_gc)
        return self

    def stop(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        if self._t0 is None:
            return
        took_ms, self._t0 = (time.perf_counter() - self._t0) * 1e3, None
        self.full += 1
        self.longest_ms = max(self.longest_ms, took_ms)
        if took_ms > self.warn_ms:
            log.warning(
                "garbage collector: a full collection took %.0f ms (%d collected); every "
                "thread waited for it",
                took_ms,
                info.get("collected", 0),
            )
        if self.refreeze_ms is not None and took_ms > self.refreeze_ms:
            gc.freeze()  # what survived this collection is not walked again
            self.refreezes += 1
            # not `gc.get_freeze_count()`: it walks every frozen object (tens of ms at 100k jobs)
            log.info("garbage collector: heap frozen again (%d times)", self.refreezes)
