"""Calls run together on one thread, their Raft writes in one group commit (issue 21).

A server answers concurrent submits each on a thread of its own, and each thread waits for its
own commit: three or so thread wake-ups per submit, which on a busy server cost as much as the
submit. `run_together(calls)` runs a batch of calls on the calling thread instead, each in a
greenlet. A call that reaches its commit (`Commands.commit_all`) parks there through the
thread's `settling_with` hook, and the next call runs. Once every call has parked or returned,
this thread drives the log once (every call proposed with `driven=True`), waits for all their
futures and resumes each parked call in turn; a call that commits again parks again.

A call that blocks in any other way (a lock, I/O) blocks the batch, never deadlocks it, unless
it parks while holding a lock another call of the batch then takes: code that holds a lock
across a commit settles that commit in place (`settling_with(settle_here)`, as AdmissionControl
does under a backlog limit). Each greenlet starts in a context of its own, as a fresh thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Generic, NamedTuple, TypeVar

from greenlet import GreenletExit, getcurrent, greenlet

from gpu_platform.application.control.commands import settle_here, settling_with

__all__ = ["run_together"]

T = TypeVar("T")


class _Park(NamedTuple):
    futures: Sequence[Future[object]]
    drive: Callable[[], None]


class _Done(NamedTuple, Generic[T]):
    outcome: T | Exception


def _capture(call: Callable[[], T]) -> _Done[T]:
    try:
        return _Done(call())
    except Exception as exc:
        return _Done(exc)


def run_together(calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
    """Each call's result, or the exception it raised, in order. If driving the log fails,
    that error is raised here and the calls still parked are ended (GreenletExit: their
    `finally` blocks run)."""
    return _Hub().run(calls)


class _Hub:
    def __init__(self) -> None:
        self._me = getcurrent()
        self._parked: list[tuple[int, greenlet, _Park]] = []

    def _settle(self, futures: Sequence[Future[object]], drive: Callable[[], None]) -> None:
        """A call's commit: park until the hub has driven and waited for it."""
        me = getcurrent()
        if me is self._me or me.parent is not self._me:
            settle_here(futures, drive)  # not one of this batch's calls
            return
        self._me.switch(_Park(futures, drive))

    def run(self, calls: Sequence[Callable[[], T]]) -> list[T | Exception]:
        done: list[_Done[T] | None] = [None] * len(calls)
        runners = [greenlet(_capture) for _ in calls]
        with settling_with(self._settle):
            try:
                for i, (runner, call) in enumerate(zip(runners, calls, strict=True)):
                    self._step(i, runner, runner.switch(call), done)
                while self._parked:
                    parked, self._parked = self._parked, []
                    parked[0][2].drive()  # one drive commits what every parked call proposed
                    for _, _, park in parked:
                        settle_here(park.futures, _nothing)
                    for i, runner, _ in parked:
                        self._step(i, runner, runner.switch(), done)
            finally:  # when the hub failed: end the calls not done
                for runner in runners:
                    if not runner.dead:
                        runner.throw(GreenletExit)
        return [d.outcome for d in done if d is not None]

    def _step(self, i: int, runner: greenlet, out: Any, done: list[_Done[T] | None]) -> None:
        if isinstance(out, _Park):
            self._parked.append((i, runner, out))
        elif isinstance(out, _Done) and runner.dead:
            done[i] = out
        else:  # a call that ended itself (GreenletExit) or switched away on its own
            raise RuntimeError(f"call {i} of a batch ended without an outcome: {out!r}")


def _nothing() -> None:
    pass
