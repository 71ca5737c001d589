"""EASY backfill: one reservation for the head job; later jobs may not delay it.

The head job is the first job in queue order that passes quota but does not fit now. Its
reservation is the earliest time it fits if running jobs end at their expected end
(`started_at + time limit`; a stopping job ends now; an unknown end is infinitely far): running
jobs are released in order of expected end until `place()` finds room (feasibility only grows
as more jobs end, so the search gallops from the first prefix that frees enough GPUs and then
bisects). The placement found there is the reservation; its GPUs that are free now are held
for it (`Hold`), so a later job can only use them if its own time limit ends before the
reservation time. Every other later job is placed around the held GPUs.

Reservation and hold cover GPUs only (CPU and memory are not held).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpu_platform.domain.placement.engine import place
from gpu_platform.domain.placement.request import GangPlacement, TaskPlacement
from gpu_platform.domain.scheduling.ledger import Ledger
from gpu_platform.domain.scheduling.model import PendingJob, Reservation, RunningJob

__all__ = ["Hold", "expected_end", "reserve"]


def expected_end(job: RunningJob, now: float) -> float:
    if job.terminating:
        return now
    return math.inf if job.expected_end is None else max(now, job.expected_end)


def _fits(job: PendingJob, ledger: Ledger) -> GangPlacement | None:
    if ledger.free_milli < job.gpu_milli or not ledger.could_fit(job.request):
        return None
    found = place(job.request, ledger.view)
    return found if isinstance(found, GangPlacement) else None


def reserve(
    job: PendingJob, now: float, running: Sequence[RunningJob], ledger: Ledger
) -> Reservation | None:
    """The earliest (time, placement) at which `job` fits as running jobs end; None when it
    does not fit even with every running job gone. The view is left as it was."""
    ends = sorted(running, key=lambda r: (expected_end(r, now), r.id))
    mark = ledger.mark()
    try:
        released = 0

        def release_to(k: int) -> None:
            nonlocal released
            while released < k:
                ledger.release_job(ends[released])
                released += 1

        # smallest prefix that frees enough GPUs by count: nothing shorter can fit
        need, k = job.gpu_milli - ledger.free_milli, 0
        while k < len(ends) and need > 0:
            need -= ends[k].gpu_milli
            k += 1
        lo, step = k - 1, 1  # lo: a prefix known not to fit (or -1)
        found: GangPlacement | None = None
        while True:
            k = min(k, len(ends))
            release_to(k)
            found = _fits(job, ledger)
            if found is not None or k == len(ends):
                break
            lo, k, step = k, k + step, step * 2
        if found is None:
            return None
        hi = k
        while hi - lo > 1:  # bisect (lo, hi]: lo does not fit, hi does
            mid = (lo + hi) // 2
            ledger.undo_to(mark)
            released = 0
            release_to(mid)
            attempt = _fits(job, ledger)
            if attempt is None:
                lo = mid
            else:
                hi, found = mid, attempt
        at = expected_end(ends[hi - 1], now) if hi > 0 else now
        return Reservation(job.id, at, found)
    finally:
        ledger.undo_to(mark)


class Hold:
    """The reservation's GPUs that are free now, held in the view for it."""

    def __init__(self, reservation: Reservation, ledger: Ledger) -> None:
        self.reservation = reservation
        self._ledger = ledger
        self._held: list[TaskPlacement] = []
        self.milli = 0  # milli-GPU held now
        self.take()

    def take(self) -> None:
        """Hold whatever of the reservation is free now."""
        for task in self.reservation.placement.tasks:
            part = self._ledger.free_part(task)
            if part is not None:
                self._ledger.bind(part)
                self._held.append(part)
                self.milli += sum(s.milli for s in part.gpus)

    def drop(self) -> None:
        """Give the held GPUs back to the view (to try a job that ends before the
        reservation); call `take()` afterwards."""
        for part in reversed(self._held):
            self._ledger.release(part)
        self._held.clear()
        self.milli = 0
