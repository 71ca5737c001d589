"""HealthMonitor and FaultInjector: where GPU and node health findings come from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from gpu_platform.domain.faults.health import HealthEvent

__all__ = ["FaultInjector", "HealthMonitor", "HealthSink"]

HealthSink = Callable[[HealthEvent], None]


@runtime_checkable
class HealthMonitor(Protocol):
    """Watches GPUs and nodes and reports findings to a sink.

    `start(sink)` starts the monitor's own threads (vendor event waits block, so they never run
    on the caller's thread) and returns at once; findings are delivered by calling `sink` from
    those threads, in the order they were observed per GPU. `sink` may block briefly (it takes
    the control plane's lock) and must not raise; a monitor survives a sink that does.
    `stop()` is idempotent and returns once the threads have ended. Heartbeats for the nodes a
    monitor speaks for are findings too (`Heartbeat`).
    """

    def start(self, sink: HealthSink) -> None: ...

    def stop(self) -> None: ...


@runtime_checkable
class FaultInjector(Protocol):
    """Scripted faults for tests and operators (`gpu-platform debug inject`).

    `inject(script)` parses one or more lines (`;` or newline separated) such as
    `xid 79 on gpu 3`, `ecc uncorrected 2 on gpu 1 node n1 at 5`, `temp 95 on gpu 0`,
    `lost gpu 2`, `remap pending on gpu 4`, `heartbeat stop node n1`; `at T` delays a line by T
    seconds. It returns the normalised lines that were scheduled, or raises ValueError naming
    the bad line (nothing of that script is scheduled then). Thread-safe.
    """

    def inject(self, script: str) -> list[str]: ...
