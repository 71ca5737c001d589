"""NoopIsolation: no confinement at all. Chosen explicitly (or when the host offers nothing),
and announced in the log at start-up."""

from __future__ import annotations

from gpu_platform.ports.outbound.isolation import IsolationSpec

__all__ = ["NoopIsolation"]


class NoopIsolation:
    """Implements Isolation by doing nothing: jobs see every CPU, memory node and device."""

    name = "none"

    def prepare(self, spec: IsolationSpec) -> tuple[str, ...]:
        return ()

    def release(self, name: str) -> None:
        return None

    def sweep(self) -> list[str]:
        return []
