"""In-memory fakes for every outbound port used by the control plane.

They keep the ports' promises (the contract suites in `gpu_platform.testing.contracts` run
against them and the real adapters alike) but are deterministic: nothing happens on a thread,
time moves only when told, and a job "process" ends only when the test delivers its exit.

FakeJobRunner programs (argv[0]):
    fake-exit CODE [OUTPUT...]   ends with CODE, writing OUTPUT to its log, at the next deliver()
    fake-forever                 runs until stopped; a stop ends it with signal 15 at deliver()
    anything else                LaunchError, as a missing program would be
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpu_platform.domain.events import DomainEvent
from gpu_platform.domain.faults.commands import HardwareRecord
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.model.job import Job
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.run_as import RunAsGrant
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec

__all__ = [
    "FakeJobRunner",
    "InMemoryGpuDiscovery",
    "InMemoryHardwareStore",
    "InMemoryJobStore",
    "InMemoryRunAsStore",
    "ManualClock",
    "RecordingPublisher",
    "SequentialJobIds",
]


class ManualClock:
    """Implements Clock; time moves only through `advance`."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self.t += seconds


class SequentialJobIds:
    """Implements IdGenerator: j-000001, j-000002, ..."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def new_job_id(self) -> str:
        with self._lock:
            self._n += 1
            return f"j-{self._n:06d}"


class InMemoryJobStore:
    """Implements JobStore in a dict. `fail_next_save` simulates a disk error."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self.fail_next_save = False
        self.closed = False

    def save(self, jobs: Sequence[Job]) -> None:
        with self._lock:
            if self.fail_next_save:
                self.fail_next_save = False
                raise OSError("simulated disk failure")
            for job in jobs:
                self._jobs[job.id] = job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def load(self) -> list[Job]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: j.seq)

    def close(self) -> None:
        self.closed = True


class InMemoryHardwareStore:
    """Implements HardwareStore in memory (share one instance across control planes to
    simulate a restart)."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], HardwareRecord] = {}
        self._audit: list[AuditRecord] = []
        self._lock = threading.Lock()

    def save_hardware(self, records: Sequence[HardwareRecord]) -> None:
        with self._lock:
            for r in records:
                self._records[(r.kind, r.name)] = r

    def load_hardware(self) -> list[HardwareRecord]:
        with self._lock:
            return [self._records[k] for k in sorted(self._records)]

    def append_audit(self, record: AuditRecord) -> None:
        with self._lock:
            self._audit.append(record)

    def audit(self, limit: int = 100) -> list[AuditRecord]:
        with self._lock:
            return self._audit[-limit:] if limit > 0 else []


class InMemoryGpuDiscovery:
    """Implements GpuDiscovery with a fixed inventory."""

    name = "memory"

    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory

    def discover(self) -> Inventory:
        return self._inventory


class RecordingPublisher:
    """Implements EventPublisher by keeping every event in order."""

    def __init__(self) -> None:
        self.events: list[DomainEvent] = []

    def publish(self, event: DomainEvent) -> None:
        self.events.append(event)


@dataclass
class _FakeAttempt:
    spec: LaunchSpec
    on_exit: Callable[[ExitReport], None]
    exit_code: int | None = None
    signal: int | None = None
    output: str = ""
    ended: bool = field(default=False)


class FakeJobRunner:
    """Implements JobRunner without processes; exits are delivered by `deliver()`."""

    PROGRAMS = ("fake-exit", "fake-forever")

    def __init__(self) -> None:
        self._live: dict[tuple[str, int, int], _FakeAttempt] = {}  # (job, epoch, rank)
        self._logs: dict[tuple[str, int, int], str] = {}  # (job, attempt, rank)
        self.orphans: set[tuple[str, int]] = set()
        self.started: list[LaunchSpec] = []
        self._lock = threading.RLock()

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        program = spec.argv[0]
        if program not in self.PROGRAMS:
            raise LaunchError(f"program {program!r} not found or not executable")
        if spec.mig_profile is not None and not spec.mig_uuids:
            raise LaunchError(f"MIG profile {spec.mig_profile}: no MIG instance was assigned")
        attempt = _FakeAttempt(spec, on_exit)
        if program == "fake-exit":
            attempt.exit_code = int(spec.argv[1]) if len(spec.argv) > 1 else 0
            attempt.output = " ".join(spec.argv[2:])
        with self._lock:
            self._live[(spec.job_id, spec.epoch, spec.rank)] = attempt
            self.started.append(spec)

    def stop(self, job_id: str, epoch: int, grace_s: float) -> bool:
        with self._lock:
            tasks = [a for (j, e, _), a in self._live.items() if (j, e) == (job_id, epoch)]
            for attempt in tasks:
                if attempt.exit_code is None and attempt.signal is None:
                    attempt.signal = 15
            return bool(tasks)

    def stop_all(self, grace_s: float) -> None:
        with self._lock:
            keys = {(j, e) for j, e, _ in self._live}
        for job_id, epoch in sorted(keys):
            self.stop(job_id, epoch, grace_s)
        self.deliver()

    def reap(self, job_id: str, epoch: int) -> int:
        with self._lock:
            if (job_id, epoch) in self.orphans:
                self.orphans.discard((job_id, epoch))
                return 1
            return 0

    def read_log(self, job_id: str, attempt: int, tail_bytes: int, rank: int = 0) -> str:
        with self._lock:
            return self._logs.get((job_id, attempt, rank), "")[-tail_bytes:]

    def read_log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int, rank: int = 0
    ) -> bytes:
        with self._lock:
            data = self._logs.get((job_id, attempt, rank), "").encode()
        return data[offset : offset + max_bytes]

    # -- test controls ----------------------------------------------------------------------

    def live(self) -> list[LaunchSpec]:
        """Attempts started and not yet reported."""
        with self._lock:
            return [a.spec for a in self._live.values()]

    def finish(self, job_id: str, exit_code: int, rank: int | None = None) -> None:
        """Make the live attempt of `job_id` (task `rank`, or every task) end with `exit_code`
        (reported at deliver()), even one that was asked to stop: a process may exit on its
        own before the signal lands."""
        found = False
        with self._lock:
            for (jid, _, r), attempt in self._live.items():
                if jid == job_id and rank in (None, r):
                    attempt.exit_code, attempt.signal = exit_code, None
                    found = True
        if not found:
            raise KeyError(f"no live attempt of {job_id}")

    def deliver(self) -> int:
        """Report every attempt that has ended; return how many were reported."""
        with self._lock:
            ended = [
                (key, a)
                for key, a in self._live.items()
                if a.exit_code is not None or a.signal is not None
            ]
            for key, a in ended:
                del self._live[key]
                out = a.output + ("\n" if a.output else "")
                self._logs[(a.spec.job_id, a.spec.attempt, a.spec.rank)] = out
        for _, a in ended:
            code = None if a.signal is not None else a.exit_code
            a.on_exit(
                ExitReport(a.spec.job_id, a.spec.epoch, code, signal=a.signal, rank=a.spec.rank)
            )
        return len(ended)


class InMemoryQuotaStore:
    """Implements QuotaStore in a dict (survives `reopen` through sharing the dict)."""

    def __init__(self, quotas: dict[str, Quota] | None = None) -> None:
        self.quotas: dict[str, Quota] = {} if quotas is None else quotas
        self._lock = threading.Lock()

    def load_quotas(self) -> dict[str, Quota]:
        with self._lock:
            return dict(self.quotas)

    def save_quota(self, tenant: str, quota: Quota | None) -> None:
        with self._lock:
            if quota is None:
                self.quotas.pop(tenant, None)
            else:
                self.quotas[tenant] = quota


class InMemoryRunAsStore:
    """Implements RunAsStore in a dict (survives `reopen` through sharing the dict)."""

    def __init__(self, grants: dict[str, RunAsGrant] | None = None) -> None:
        self.grants: dict[str, RunAsGrant] = {} if grants is None else grants
        self._lock = threading.Lock()

    def load_grants(self) -> dict[str, RunAsGrant]:
        with self._lock:
            return dict(self.grants)

    def save_grant(self, tenant: str, grant: RunAsGrant | None) -> None:
        with self._lock:
            if grant is None:
                self.grants.pop(tenant, None)
            else:
                self.grants[tenant] = grant
