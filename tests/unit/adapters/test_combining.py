"""Calls from many threads, batched by their callers (adapters/inbound/combining.py): a lone
call runs on its own thread; calls that queue behind a busy lane go as one batch; each caller
gets its own result or exception; every lane comes back, whatever the interleaving."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.inbound import combining
from gpu_platform.adapters.inbound.combining import Combining


def test_a_lone_call_runs_on_the_callers_thread() -> None:
    together = Combining()
    assert together.call(threading.get_ident) == threading.get_ident()
    assert together.batches == 1


def _behind_a_busy_lane(together: Combining, calls: list[Any]) -> list[Any]:
    """A gated call holds the only lane while `calls` queue; then the gate opens."""
    opened, inside = threading.Event(), threading.Event()

    def first() -> str:
        inside.set()
        assert opened.wait(10)
        return "first"

    def outcome(fn: Any) -> Any:
        try:
            return together.call(fn)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(len(calls) + 1) as pool:
        head = pool.submit(together.call, first)
        assert inside.wait(10)
        rest = [pool.submit(outcome, c) for c in calls]
        while len(together._queued) < len(calls):  # every one queued behind the gate
            threading.Event().wait(0.005)
        opened.set()
        assert head.result(10) == "first"
        return [f.result(10) for f in rest]


def test_calls_queued_behind_a_busy_lane_go_as_one_batch() -> None:
    together = Combining(lanes=1)
    out = _behind_a_busy_lane(together, [lambda n=n: n for n in range(12)])
    assert out == list(range(12))
    assert together.batches == 2
    assert together._free == 1 and together._queued == []


def test_each_caller_gets_its_own_exception() -> None:
    def refused() -> int:
        raise LookupError("no such job")

    out = _behind_a_busy_lane(Combining(lanes=1), [lambda: 1, refused, lambda: 3])
    assert out[0] == 1 and out[2] == 3 and isinstance(out[1], LookupError)


def test_a_batch_that_fails_whole_fails_each_of_its_callers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = combining.run_together

    def broken(calls: list[Any]) -> list[Any]:
        if len(calls) > 1:
            raise OSError("the log could not be driven")
        return real(calls)

    monkeypatch.setattr(combining, "run_together", broken)
    together = Combining(lanes=1)
    out = _behind_a_busy_lane(together, [lambda: 1, lambda: 2])
    assert all(isinstance(o, OSError) for o in out)
    assert together._free == 1  # the lane came back


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_every_caller_gets_its_result_and_every_lane_comes_back(
    lanes: int, callers: int, seed: int
) -> None:
    together = Combining(lanes=lanes, most=5)
    rnd = random.Random(seed)
    pauses = [rnd.choice([0.0, 0.0, 0.001, 0.003]) for _ in range(callers)]

    def work(n: int) -> int:
        threading.Event().wait(pauses[n])
        return n * n

    with ThreadPoolExecutor(callers) as pool:
        results = list(pool.map(lambda n: together.call(lambda: work(n)), range(callers)))
    assert results == [n * n for n in range(callers)]
    assert together._free == lanes and together._queued == []


def test_a_call_inside_a_batch_runs_at_once_in_it() -> None:
    """An API worker's item reaches the servicer inside a batch: it must not queue for a lane
    (that wait would block the batch it belongs to), even with every lane taken."""
    from gpu_platform.adapters.inbound.together import run_together

    together = Combining(lanes=1)
    together._free = 0  # every lane busy elsewhere
    out = run_together([lambda: together.call(lambda: 1), lambda: together.call(lambda: 2)])
    assert out == [1, 2] and together.batches == 0
