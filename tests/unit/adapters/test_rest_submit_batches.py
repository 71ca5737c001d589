"""REST submits in batches (rest/submit_batches.py): what arrives while the lanes are busy
waits and goes as one batch; each caller gets its own result or exception; a caller that gives
up does not disturb the others; a failed batch fails each of its callers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from gpu_platform.adapters.inbound.rest.submit_batches import SubmitBatches


def _gate() -> tuple[threading.Event, Callable[[], str]]:
    opened = threading.Event()

    def first() -> str:
        assert opened.wait(10)
        return "first"

    return opened, first


async def _queued_behind(batches: SubmitBatches, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run a gated call, queue `calls` behind it, open the gate: their outcomes."""
    opened, first = _gate()
    head = asyncio.ensure_future(batches.call(first))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(batches.call(c)) for c in calls]
    await asyncio.sleep(0.05)
    opened.set()
    assert await head == "first"
    return await asyncio.gather(*rest, return_exceptions=True)


def test_calls_that_arrive_while_the_lane_is_busy_go_as_one_batch() -> None:
    batches = SubmitBatches(lanes=1)
    try:
        out = asyncio.run(_queued_behind(batches, [lambda n=n: n for n in range(10)]))
        assert out == list(range(10))
        assert batches.batches == 2  # the gated one, then the ten together
    finally:
        batches.close()


def test_each_caller_gets_its_own_exception_and_the_batch_goes_on() -> None:
    def refused() -> int:
        raise LookupError("no such job")

    batches = SubmitBatches(lanes=1)
    try:
        out = asyncio.run(_queued_behind(batches, [lambda: 1, refused, lambda: 3]))
        assert out[0] == 1 and out[2] == 3
        assert isinstance(out[1], LookupError)
    finally:
        batches.close()


def test_a_caller_that_gives_up_leaves_the_others_their_results() -> None:
    async def scenario(batches: SubmitBatches) -> list[Any]:
        opened, first = _gate()
        head = asyncio.ensure_future(batches.call(first))
        await asyncio.sleep(0)
        gone = asyncio.ensure_future(batches.call(lambda: "gone"))
        kept = asyncio.ensure_future(batches.call(lambda: "kept"))
        await asyncio.sleep(0.01)
        gone.cancel()  # the client went away
        opened.set()
        return [await head, await kept, gone.cancelled()]

    batches = SubmitBatches(lanes=1)
    try:
        assert asyncio.run(scenario(batches)) == ["first", "kept", True]
    finally:
        batches.close()


def test_a_batch_that_fails_whole_fails_each_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_platform.adapters.inbound.rest import submit_batches

    def broken(calls: list[Callable[[], Any]]) -> list[Any]:
        raise OSError("the log could not be driven")

    monkeypatch.setattr(submit_batches, "run_together", broken)
    batches = SubmitBatches(lanes=1)

    async def scenario() -> list[Any]:
        return await asyncio.gather(
            *(batches.call(lambda: 1) for _ in range(3)), return_exceptions=True
        )

    try:
        out = asyncio.run(scenario())
        assert all(isinstance(o, OSError) for o in out)
    finally:
        batches.close()
