"""The overlap check of `make chaos` sees two attempts of one job alive at once (it would
catch a fencing failure), and a lone attempt, or zombies, are no overlap."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from gpu_platform.testing.overlap import AttemptWatcher, live_attempts

TAG = f"sleep-tag-{os.getpid()}"


def task(job: str, epoch: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, GPU_PLATFORM_ATTEMPT=f"{job}:{epoch}")
    code = "import time; time.sleep(60)"
    return subprocess.Popen([sys.executable, "-c", code, TAG], env=env)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def test_two_epochs_of_one_job_alive_together_are_an_overlap(
    procs: list[subprocess.Popen[bytes]],
) -> None:
    watcher = AttemptWatcher(TAG, interval=0.02)
    watcher.start()
    procs.append(task("j-1", 1))
    procs.append(task("j-2", 5))  # another job: never an overlap with j-1
    time.sleep(0.5)
    assert watcher.overlaps() == []
    procs.append(task("j-1", 2))
    deadline = time.monotonic() + 10
    while not watcher.overlaps() and time.monotonic() < deadline:
        time.sleep(0.02)
    watcher.stop()
    (first, *_) = watcher.overlaps()
    assert (first.job_id, first.epochs) == ("j-1", (1, 2))


def test_an_ended_attempt_is_not_counted(procs: list[subprocess.Popen[bytes]]) -> None:
    old = task("j-1", 1)
    procs.append(old)
    time.sleep(0.3)
    assert live_attempts(TAG.encode()) == {"j-1": {1}}
    old.kill()
    old.wait()
    assert live_attempts(TAG.encode()) == {}
