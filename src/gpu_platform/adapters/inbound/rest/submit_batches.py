"""Submits from the REST event loop, run in batches on a few threads (issue 21).

The loop queues each submit's call and awaits its future. At most `lanes` batches run at once,
each on a pool thread with `together.run_together`: the batch's calls share one group commit
and no call waits on a thread of its own. What arrives while the lanes are busy waits for the
next batch, so batches grow with the load; a lone submit runs at once as a batch of one.
Everything but the batch itself happens on the loop's thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpu_platform.adapters.inbound.together import run_together

__all__ = ["SubmitBatches"]

_Queued = tuple[Callable[[], Any], "asyncio.Future[Any]"]


class SubmitBatches:
    def __init__(self, lanes: int = 2, most: int = 256, name: str = "rest-submit") -> None:
        self._pool = ThreadPoolExecutor(lanes, thread_name_prefix=name)
        self._lanes = lanes
        self._most = most
        self._queued: list[_Queued] = []
        self._running = 0
        self.batches = 0  # batches started (for tests and profiles)

    async def call(self, fn: Callable[[], Any]) -> Any:
        """`fn()`'s result (or its exception), run in a batch."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queued.append((fn, future))
        if self._running < self._lanes:
            self._start(loop)
        return await future

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._queued = self._queued[: self._most], self._queued[self._most :]
        self._running += 1
        self.batches += 1
        work = loop.run_in_executor(self._pool, run_together, [fn for fn, _ in batch])
        work.add_done_callback(lambda done: self._finished(loop, batch, done))

    def _finished(
        self, loop: asyncio.AbstractEventLoop, batch: list[_Queued], work: asyncio.Future[Any]
    ) -> None:
        self._running -= 1
        try:
            outcomes: list[Any] = work.result()
        except BaseException as exc:  # the batch failed as a whole (its log could not be driven)
            outcomes = [exc] * len(batch)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # the request was given up (the client went away)
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        if self._queued and self._running < self._lanes:
            self._start(loop)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
