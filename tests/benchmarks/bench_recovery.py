"""Fault -> running again, single node (issue 7's measure).

The real application and domain with real processes (`ProcessJobRunner`, `sleep 600`, no
isolation), the durable SQLite stores `serve` uses, and the simulated hardware as injector and
GPU reset. Each trial: a job runs; `inject("xid N on gpu G")`; the clock stops when the job is
RUNNING again on other GPUs with a new epoch (its old process stopped by SIGTERM and reaped
first, as recovery requires). Rows:

- recovery.xid79_to_running   1-GPU job, XID 79 (GPU offline)
- recovery.xid79_gang_to_running   4-GPU job, one GPU lost, the whole gang restarts
- recovery.xid48_to_running   1-GPU job, XID 48 (GPU reset in the background; the job may
  land on the same GPU again once it passed its reset)

baseline: the same path with the in-memory job store (no fsync), to separate durability cost.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _harness import baseline, result

from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.adapters.outbound.sim import SimulatedHardware, default_node
from gpu_platform.adapters.outbound.storage import SqliteHardwareStore, SqliteJobStore
from gpu_platform.adapters.outbound.system import SystemClock
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.events import DomainEvent, JobStarted
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.job_store import JobStore
from gpu_platform.testing.fakes import InMemoryHardwareStore, InMemoryJobStore, SequentialJobIds


class StartWatcher:
    """EventPublisher that lets the bench wait for a job's next start."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.started: dict[str, int] = {}

    def publish(self, event: DomainEvent) -> None:
        if isinstance(event, JobStarted):
            with self.cond:
                self.started[event.job_id] = event.epoch
                self.cond.notify_all()

    def wait_started(self, job_id: str, after_epoch: int = 0, timeout: float = 30.0) -> int:
        with self.cond:
            ok = self.cond.wait_for(
                lambda: self.started.get(job_id, 0) > after_epoch, timeout=timeout
            )
            if not ok:
                raise RuntimeError(f"{job_id} did not start again within {timeout}s")
            return self.started[job_id]


def trials(durable: bool, xid: int, gpus: int, n: int, work: Path) -> list[float]:
    inventory = Inventory((default_node(),), source="sim", simulated=True)
    sim = SimulatedHardware(inventory, heartbeats=False)
    watcher = StartWatcher()
    store: JobStore
    if durable:
        store = SqliteJobStore(work / "state.db")
        hardware: Any = SqliteHardwareStore(work / "state.db")
    else:
        store, hardware = InMemoryJobStore(), InMemoryHardwareStore()
    runner = ProcessJobRunner(work / "jobs")
    plane = ControlPlane(
        inventory,
        store,
        runner,
        SystemClock(),
        SequentialJobIds(),
        watcher,
        stop_grace_s=5.0,
        schedule_interval_s=1.0,
        hardware=hardware,
        gpu_reset=sim,
        injector=sim,
        reset_in_background=True,
    )
    plane.start()
    sim.start(plane.report_health)
    samples = []
    try:
        for _ in range(n):
            job = plane.submit(JobSpec(("sleep", "600"), gpus=gpus))
            epoch = watcher.wait_started(job.id)
            alloc = plane.get(job.id).allocation
            assert alloc is not None and alloc.epoch == epoch
            gpu = alloc.gpu_indices[-1]
            t0 = time.perf_counter()
            plane.inject(f"xid {xid} on gpu {gpu}", actor="bench")
            new = watcher.wait_started(job.id, after_epoch=epoch)
            samples.append((time.perf_counter() - t0) * 1e6)
            moved = plane.get(job.id).allocation
            assert moved is not None and moved.epoch == new
            # after XID 79 the GPU is offline; after XID 48 it may pass its reset and be reused
            assert xid != 79 or gpu not in moved.gpu_indices
            plane.cancel(job.id)
            deadline = time.monotonic() + 30
            while plane.get(job.id).holds_gpus and time.monotonic() < deadline:
                time.sleep(0.005)
            if plane.gpus()[gpu].state != "AVAILABLE":
                deadline = time.monotonic() + 30
                while str(plane.gpus()[gpu].state) == "RESETTING" and time.monotonic() < deadline:
                    time.sleep(0.005)
                if str(plane.gpus()[gpu].state) != "AVAILABLE":
                    plane.gpu_action("node-0", gpu, "online", reason="bench", actor="bench")
    finally:
        sim.stop()
        plane.shutdown()
        runner.close(1.0)
        store.close()
        if durable:
            hardware.close()
    return samples


def run(quick: bool) -> list[dict[str, Any]]:
    n = 5 if quick else 30
    rows = []
    for name, xid, gpus in (
        ("recovery.xid79_to_running", 79, 1),
        ("recovery.xid79_gang_to_running", 79, 4),
        ("recovery.xid48_to_running", 48, 1),
    ):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            durable = trials(True, xid, gpus, n, Path(a))
            memory = trials(False, xid, gpus, n, Path(b))
        base = result(name + ".memory_store", {}, memory)
        rows.append(
            result(
                name,
                {"xid": xid, "job_gpus": gpus, "node_gpus": 8, "trials": n, "store": "sqlite"},
                durable,
                baseline=baseline("same path, in-memory store", base),
                extra={"max_us": round(max(durable), 1)},
            )
        )
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row["name"], "p50 ms", row["p50_us"] / 1000, "p99 ms", row["p99_us"] / 1000)
        print("   baseline p50 ms", row["baseline"]["p50_us"] / 1000)
