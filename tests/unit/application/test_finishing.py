"""Finishing (`application.control.finishing`): finishes reported while a commit is under way
are committed together as one JobBatch, each reporter answered from it; a lone finish is
committed at once; a refusal is answered as such and an error reaches every reporter."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpu_platform.application.control.finishing import MAX_BATCH, Finishing
from gpu_platform.application.control.shared import Shared
from gpu_platform.domain.cluster_state import ClusterState, Command, FinishJob, JobBatch
from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.events import DomainEvent


class _Log:
    """A commit path over a real ClusterState whose first commit waits until released."""

    def __init__(self) -> None:
        self.state = ClusterState.empty()
        self.batches: list[JobBatch] = []
        self.release = threading.Event()
        self.published: list[DomainEvent] = []

    def commit_all(self, commands: list[Command]) -> list[list[DomainEvent] | DomainError]:
        (batch,) = commands
        assert isinstance(batch, JobBatch)
        self.batches.append(batch)
        if len(self.batches) == 1:
            assert self.release.wait(10)
        try:
            return [self.state.apply(batch)]
        except DomainError as exc:
            return [exc]

    def effects(self, events: list[DomainEvent]) -> list[DomainEvent]:
        self.published += events
        return events


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def _finishing(log: _Log, replicated: bool = True) -> Finishing:
    shared = SimpleNamespace(replication=object() if replicated else None)
    return Finishing(
        cast(Shared, shared), commit_all=log.commit_all, effects=log.effects, lock_let_go=_nothing
    )


def _wait_until(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "condition not met in 10 s"
        time.sleep(0.005)


def test_finishes_reported_during_a_commit_are_committed_together_as_one_batch() -> None:
    log = _Log()
    finishing = _finishing(log)
    threads = [
        threading.Thread(target=finishing.finish, args=(FinishJob(f"j{n}", 1, 0, 1.0),))
        for n in range(4)
    ]
    threads[0].start()
    _wait_until(lambda: len(log.batches) == 1)  # j0's commit is under way
    for t in threads[1:]:
        t.start()
    _wait_until(lambda: len(finishing._queue) == 3)
    log.release.set()
    for t in threads:
        t.join(10)
    assert [len(b.items) for b in log.batches] == [1, 3]
    assert {i.job_id for i in log.batches[1].items} == {"j1", "j2", "j3"}
    assert (finishing.batches, finishing.finishes) == (2, 4)
    assert len(log.published) == 4  # every item's outcome (here: unknown jobs, refused)


def test_a_lone_finish_is_committed_at_once_and_a_refusal_does_not_raise() -> None:
    log = _Log()
    log.release.set()
    finishing = _finishing(log)
    finishing.finish(FinishJob("nobody", 1, 0, 1.0))  # NotFound: answered, logged
    assert [len(b.items) for b in log.batches] == [1]


def test_an_error_of_the_commit_reaches_every_reporter_of_the_batch() -> None:
    log = _Log()
    log.release.set()

    def broken(commands: list[Command]) -> list[list[DomainEvent] | DomainError]:
        raise RuntimeError("no leader")

    shared = cast(Shared, SimpleNamespace(replication=object()))
    finishing = Finishing(shared, commit_all=broken, effects=log.effects, lock_let_go=_nothing)
    with pytest.raises(RuntimeError, match="no leader"):
        finishing.finish(FinishJob("j", 1, 0, 1.0))
    assert not finishing._committing  # the next reporter may commit


def test_embedded_a_finish_is_executed_as_its_own_command() -> None:
    executed: list[Command] = []
    shared = cast(Shared, SimpleNamespace(replication=None, execute=executed.append))
    log = _Log()
    finishing = Finishing(
        shared, commit_all=log.commit_all, effects=log.effects, lock_let_go=_nothing
    )
    finishing.finish(FinishJob("j", 1, 0, 1.0))
    assert executed == [FinishJob("j", 1, 0, 1.0)]
    assert log.batches == []


def test_finishes_handed_over_together_are_one_batch_and_return_once_all_are_committed() -> None:
    log = _Log()
    finishing = _finishing(log)
    first = threading.Thread(target=finishing.finish, args=(FinishJob("j0", 1, 0, 1.0),))
    first.start()
    _wait_until(lambda: len(log.batches) == 1)  # j0's commit is under way
    together = [FinishJob(f"j{n}", 1, 0, 1.0) for n in range(1, 4)]
    done = threading.Event()

    def hand_over() -> None:
        finishing.finish_all(together)
        done.set()

    both = threading.Thread(target=hand_over)
    both.start()
    _wait_until(lambda: len(finishing._queue) == 3)
    assert not done.is_set()  # queued, not yet committed
    log.release.set()
    for t in (first, both):
        t.join(10)
    assert done.is_set()
    assert [[i.job_id for i in b.items] for b in log.batches] == [["j0"], ["j1", "j2", "j3"]]
    assert (finishing.batches, finishing.finishes) == (2, 4)


def test_more_finishes_than_one_batch_holds_are_committed_in_order_before_returning() -> None:
    log = _Log()
    log.release.set()
    finishing = _finishing(log)
    commands = [FinishJob(f"j{n}", 1, 0, 1.0) for n in range(MAX_BATCH + 3)]
    finishing.finish_all(commands)
    assert [len(b.items) for b in log.batches] == [MAX_BATCH, 3]
    assert [i.job_id for b in log.batches for i in b.items] == [c.job_id for c in commands]
