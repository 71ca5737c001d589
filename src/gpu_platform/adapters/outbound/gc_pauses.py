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
"""

from __future__ import annotations

import gc
import logging

__all__ = ["freeze_startup_heap"]

log = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect, then exempt every object alive now from later collections; returns how many
    objects are frozen in all (`gc.get_freeze_count()`)."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("garbage collector: %d startup objects frozen (not walked again)", frozen)
    return frozen
