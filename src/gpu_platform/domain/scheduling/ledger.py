"""The cycle's scratch changes to the caller's `ClusterView`, always undone.

`decide` binds what it places, releases running jobs to try "what if they were gone" (backfill
reservations, victim search) and holds a reservation's free GPUs so backfilled work keeps off
them. Every change goes through `Ledger`, which records it; `undo_all()` reverts the view to
what the caller passed in, so `decide` has no effect on its argument.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpu_platform.domain.placement.request import GangPlacement, GpuRequest, GpuShare, TaskPlacement
from gpu_platform.domain.placement.view import ClusterView
from gpu_platform.domain.scheduling.model import RunningJob

__all__ = ["Ledger", "gpu_keys"]

_Change = tuple[int, TaskPlacement, int, int]  # (+1 bound / -1 released, task, cpu, memory)


def gpu_keys(tasks: Iterable[TaskPlacement]) -> set[tuple[str, int]]:
    """(node, GPU index) of every share in `tasks`."""
    return {(t.node, s.gpu.index) for t in tasks for s in t.gpus}


class Ledger:
    """Binds and releases on `view`, each recorded so it can be undone in reverse order."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self._log: list[_Change] = []
        self.free_milli = sum(sum(slot.free) for slot in view.slots.values())

    def mark(self) -> int:
        return len(self._log)

    def bind(self, task: TaskPlacement, cpu: int = 0, memory: int = 0) -> None:
        self.view.bind(task, cpu, memory)
        self._log.append((1, task, cpu, memory))
        self.free_milli -= sum(s.milli for s in task.gpus)

    def release(self, task: TaskPlacement, cpu: int = 0, memory: int = 0) -> None:
        self.view.release(task, cpu, memory)
        self._log.append((-1, task, cpu, memory))
        self.free_milli += sum(s.milli for s in task.gpus)

    def bind_gang(self, placement: GangPlacement, cpu: int, memory: int) -> None:
        for task in placement.tasks:
            self.bind(task, cpu, memory)

    def release_job(self, job: RunningJob) -> None:
        """Release `job`'s tasks on nodes in the view. A running job's node may be out of it
        (a new leader's view holds only nodes whose agent has reconnected): nothing placed
        there could use what it frees, so those tasks are skipped."""
        for task in job.tasks:
            if task.node in self.view.slots:
                self.release(task, job.cpu_milli, job.memory_bytes)

    def bind_job(self, job: RunningJob) -> None:
        """Undo `release_job(job)` (tasks on nodes out of the view are skipped alike)."""
        for task in job.tasks:
            if task.node in self.view.slots:
                self.bind(task, job.cpu_milli, job.memory_bytes)

    def undo_to(self, mark: int) -> None:
        """Revert every change made after `mark`."""
        while len(self._log) > mark:
            sign, task, cpu, memory = self._log.pop()
            if sign > 0:
                self.view.release(task, cpu, memory)
            else:
                self.view.bind(task, cpu, memory)
            self.free_milli += sign * sum(s.milli for s in task.gpus)

    def undo_all(self) -> None:
        self.undo_to(0)

    def could_fit(self, request: GpuRequest) -> bool:
        """A necessary condition for `place(request)`: enough nodes have `gpus` GPUs with
        `gpu_milli` free each for `tasks` tasks (topology, CPU and memory not checked). Much
        cheaper than a failing `place()`, which also explains itself."""
        if request.gpus == 0:
            return True
        need, per, milli = request.tasks, request.gpus, request.gpu_milli
        for slot in self.view.slots.values():
            usable = sum(1 for f in slot.free if f >= milli)
            need -= usable // per
            if need <= 0:
                return True
        return False

    def free_part(self, task: TaskPlacement) -> TaskPlacement | None:
        """The part of `task`'s GPU shares that is free in the view now (None if none is):
        what a reservation can hold before the jobs on the rest of it end."""
        slot = self.view.slots.get(task.node)
        if slot is None:
            return None
        positions = {g.index: p for p, g in enumerate(self.view.classes[slot.hw].gpus)}
        shares = []
        for share in task.gpus:
            free = slot.free[positions[share.gpu.index]]
            if free > 0:
                shares.append(GpuShare(share.gpu, min(free, share.milli)))
        if not shares:
            return None
        return TaskPlacement(task.node, tuple(shares), task.numa_nodes, (), task.score)
