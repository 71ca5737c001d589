"""Calls run together on one thread, each in a greenlet (together.run_together): a call parks
at its commit, the thread drives one group commit for every parked call and resumes them. Here
with scripted calls (any number of commits, refusals, a failing drive), and with the API
workers' batches through the server's real chain over a one-voter Raft log."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextvars import ContextVar, copy_context
from functools import partial
from pathlib import Path

import grpc
import pytest
from greenlet import GreenletExit
from hypothesis import given
from hypothesis import strategies as st

from gpu_platform.adapters.inbound.grpc.front_codec import (
    Answer,
    Item,
    decode_answers,
    encode_items,
)
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.together import run_together
from gpu_platform.application.control import commands
from gpu_platform.application.replication import RaftReplication
from gpu_platform.infrastructure.config import Settings
from gpu_platform.infrastructure.container import Container


class _Log:
    """Proposals and drives, as a one-voter log sees them: a drive settles what is proposed."""

    def __init__(self) -> None:
        self.proposed: list[Future[object]] = []
        self.drives = 0
        self.fail = False

    def commit(self, value: object) -> object:
        """What Commands.commit_all does: propose, then settle the way this thread says."""
        future: Future[object] = Future()
        self.proposed.append(future)
        settle = getattr(commands._settles, "settle", None) or commands.settle_here
        settle([future], lambda: self._drive(value))
        return future.result()

    def _drive(self, value: object) -> None:
        self.drives += 1
        if self.fail:
            raise OSError("the disk is gone")
        for future in self.proposed:
            if not future.done():
                future.set_result("ok")


def _item(n: int) -> Item:
    return Item((), "", -1.0, bytes([n]))


def _one(log: _Log, commits: list[int], ended: list[int] | None = None) -> Callable[[Item], Answer]:
    def one(item: Item) -> Answer:
        n = item.request[0]
        try:
            for _ in range(commits[n]):
                log.commit(n)
            return Answer(0, "", (), bytes([n]))
        finally:
            if ended is not None:
                ended.append(n)

    return one


@given(st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_each_round_of_commits_is_one_drive_and_answers_keep_their_order(
    commits: list[int],
) -> None:
    log = _Log()
    one = _one(log, commits)
    answers = run_together([partial(one, _item(n)) for n in range(len(commits))])
    assert [a.response for a in answers if isinstance(a, Answer)] == [
        bytes([n]) for n in range(len(commits))
    ]
    assert log.drives == max(commits)  # every item of a round parks before the one drive
    assert all(f.done() for f in log.proposed) and len(log.proposed) == sum(commits)


def test_outside_a_batch_a_commit_drives_and_waits_on_its_own_thread() -> None:
    log = _Log()
    assert log.commit("x") == "ok" and log.drives == 1
    seen: list[object] = []

    def elsewhere() -> None:  # another thread, while a batch runs: not one of its items
        seen.append(log.commit("y"))

    def one(item: Item) -> Answer:
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        log.commit("z")
        return Answer(0, "", (), b"")

    run_together([partial(one, _item(0))])
    assert seen == ["ok"] and log.drives == 3


def test_a_failed_drive_fails_the_batch_and_ends_every_parked_item() -> None:
    log, ended = _Log(), []
    log.fail = True
    with pytest.raises(OSError, match="disk"):
        one = _one(log, [1, 0, 2], ended)
        run_together([partial(one, _item(n)) for n in range(3)])
    assert sorted(ended) == [0, 1, 2]  # their finally blocks ran (GreenletExit in the parked)


def test_a_call_that_raises_gets_its_exception_and_the_others_their_results() -> None:
    def refused() -> int:
        raise ValueError("no")

    out = run_together([lambda: 1, refused, lambda: 3])
    assert out[0] == 1 and out[2] == 3
    assert isinstance(out[1], ValueError)


def test_a_call_that_ends_itself_is_not_mistaken_for_a_result() -> None:
    def ends() -> int:
        raise GreenletExit

    with pytest.raises(RuntimeError, match="without an outcome"):
        run_together([ends])


def _replicated(**extra: object) -> Iterator[Container]:
    """A one-voter replicated server (the default `serve`), in process, with two workers."""
    with tempfile.TemporaryDirectory(prefix="fb-") as tmp:
        settings = Settings(
            server_id=1,
            data_dir=Path(tmp),
            grpc_port=0,
            raft_port=0,
            agent_port=0,
            api_workers=2,
            isolation="none",
            schedule_interval_seconds=3600,
            **extra,  # type: ignore[arg-type]
        )
        container = Container(settings=settings)
        try:
            replication = container.replication()
            for _ in range(300):  # the sole voter elects itself (no agent here: no wait_ready)
                if replication.is_leader():
                    break
                time.sleep(0.05)
            container.grpc_server()
            yield container
        finally:
            container.shutdown_resources()


@pytest.fixture(scope="module")
def replicated() -> Iterator[Container]:
    yield from _replicated()


@pytest.fixture
def limited() -> Iterator[Container]:
    yield from _replicated(max_queued_jobs_per_tenant=30)


def _frame(requests: list[pb.SubmitJobRequest]) -> bytes:
    return encode_items(
        [Item((), "ipv4:127.0.0.1:1", 10.0, r.SerializeToString()) for r in requests]
    )


def test_a_batch_of_submits_is_one_group_commit_on_the_real_log(
    replicated: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    replication = replicated.replication()
    assert isinstance(replication, RaftReplication)
    drives = []
    real = replication.drive
    monkeypatch.setattr(replication, "drive", lambda: drives.append(1) or real())
    items = replicated.grpc_server().submit_items
    assert items is not None
    requests = [pb.SubmitJobRequest(command=["true"], name=f"b{n}") for n in range(12)]
    requests.insert(5, pb.SubmitJobRequest(command=["true"], gpus=-1))  # refused, no commit
    answers = decode_answers(items.batch(_frame(requests)))
    assert len(drives) == 1
    codes = [a.code for a in answers]
    assert codes[5] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert codes[:5] + codes[6:] == [0] * 12
    jobs = [pb.Job.FromString(a.response) for a in answers if a.code == 0]
    assert [j.name for j in jobs] == [f"b{n}" for n in range(12)]
    stored = {j.id: j.spec.name for j in replicated.control_plane().list_jobs()}
    assert all(stored[j.id] == j.name for j in jobs)


def test_backlog_limits_hold_exactly_in_a_batch_and_nothing_deadlocks(limited: Container) -> None:
    """Under a backlog limit the check and the submit hold a lock across the commit (exact
    limits), so those items settle their commits themselves instead of parking behind it."""
    items = limited.grpc_server().submit_items
    assert items is not None
    waiting = len(limited.control_plane().list_jobs())
    requests = [pb.SubmitJobRequest(command=["true"], tenant="team-l") for _ in range(40)]
    answers = decode_answers(items.batch(_frame(requests)))
    ok = [a for a in answers if a.code == 0]
    full = [a for a in answers if a.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]]
    assert len(ok) == 30 and len(full) == 10, (waiting, {a.details for a in answers if a.code})


def test_each_call_keeps_its_own_context_across_its_park() -> None:
    """As REST hands its calls over: each in a copy of its request's context."""
    var: ContextVar[int] = ContextVar("var", default=-1)
    log = _Log()

    def inside(n: int) -> tuple[int, int]:
        seen = var.get()
        var.set(n * 10)
        log.commit(n)  # parks; the other calls set their own values meanwhile
        return seen, var.get()

    calls = []
    for n in range(5):
        var.set(n)
        calls.append(partial(copy_context().run, inside, n))
    assert run_together(calls) == [(n, n * 10) for n in range(5)]
    assert log.drives == 1
