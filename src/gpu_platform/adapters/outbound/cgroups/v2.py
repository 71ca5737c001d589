"""CgroupV2Isolation: one group per attempt under `<root>/<prefix>/<attempt>` on the unified
hierarchy, with cpuset.cpus/cpuset.mems, memory.max and pids.max.

Device filtering on cgroup v2 needs an eBPF program; systemd installs one for a transient unit
with `DeviceAllow=`. Without systemd (as in containers) this adapter cannot filter devices: it
says so once in the log and in `limitations`, and documents it (docs/isolation.md) rather than
pretending. Visible-device masks still steer CUDA/ROCm/Level Zero to the right GPUs.
"""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from gpu_platform.adapters.outbound.cgroups.common import (
    cpu_list,
    empty_and_remove,
    remove_empty_levels,
    write,
)
from gpu_platform.ports.outbound.isolation import IsolationError, IsolationSpec

__all__ = ["CgroupV2Isolation"]

log = structlog.get_logger(__name__)


class CgroupV2Isolation:
    """Implements Isolation on a cgroup v2 (unified) hierarchy."""

    name = "cgroup-v2"

    def __init__(self, root: str | Path = "/sys/fs/cgroup", prefix: str = "gpu-platform") -> None:
        self.root = Path(root)
        self.base = self.root / prefix
        controllers_file = self.root / "cgroup.controllers"
        if not controllers_file.exists():
            raise IsolationError(f"{self.root} is not a cgroup v2 hierarchy")
        available = set(controllers_file.read_text().split())
        self.controllers = tuple(c for c in ("cpuset", "memory", "pids") if c in available)
        self._cpu: bool | None = None if "cpu" in available else False  # None: not tried
        self.limitations = ("device allow-list not enforced on cgroup v2 without systemd",)
        self._lock = threading.Lock()
        self._ready = False
        self._warned = False

    def use_prefix(self, prefix: str) -> None:
        """Place this adapter's groups under `prefix` (one level) instead."""
        self.base = self.root / prefix.replace("/", "-")
        self._ready = False

    def _setup(self) -> None:
        if self._ready:
            return
        try:
            self.base.mkdir(exist_ok=True)
        except OSError as exc:
            raise IsolationError(f"cannot create {self.base}: {exc.strerror or exc}") from exc
        enable = " ".join(f"+{c}" for c in self.controllers)
        if enable:
            write(self.root / "cgroup.subtree_control", enable)
            write(self.base / "cgroup.subtree_control", enable)
        self._ready = True

    def _cpu_enabled(self) -> bool:
        """Enable the cpu controller for the first job with a CPU request (the kernel refuses
        it e.g. while real-time tasks sit in other groups: then CPU requests go uncapped)."""
        if self._cpu is None:
            try:
                write(self.root / "cgroup.subtree_control", "+cpu")
                write(self.base / "cgroup.subtree_control", "+cpu")
                self._cpu = True
            except IsolationError as exc:
                self._cpu = False
                log.warning("cpu controller not enabled: CPU requests not capped", error=str(exc))
        return self._cpu

    def prepare(self, spec: IsolationSpec) -> tuple[str, ...]:
        with self._lock:
            self._setup()
            group = self.base / spec.name
            try:
                group.mkdir(exist_ok=True)
                if spec.cpus or spec.mems:
                    if "cpuset" not in self.controllers:
                        raise IsolationError("cpuset controller not available on cgroup v2")
                    if spec.cpus:
                        write(group / "cpuset.cpus", cpu_list(spec.cpus))
                    if spec.mems:
                        write(group / "cpuset.mems", cpu_list(spec.mems))
                if spec.cpu_milli and self._cpu_enabled():  # CFS bandwidth per 100 ms period
                    write(group / "cpu.max", f"{spec.cpu_milli * 100} 100000")
                if spec.memory_bytes is not None:
                    write(group / "memory.max", str(spec.memory_bytes))
                if spec.pids_max is not None:
                    write(group / "pids.max", str(spec.pids_max))
            except (OSError, IsolationError) as exc:
                empty_and_remove(group)
                if isinstance(exc, IsolationError):
                    raise
                raise IsolationError(f"cgroup v2 set-up for {spec.name}: {exc}") from exc
            if spec.devices is not None and not self._warned:
                self._warned = True
                log.warning("device allow-list not enforced", reason=self.limitations[0])
            return (str(group / "cgroup.procs"),)

    def release(self, name: str) -> None:
        with self._lock:
            empty_and_remove(self.base / name)

    def sweep(self) -> list[str]:
        if not self.base.is_dir():
            return []
        names = sorted(p.name for p in self.base.iterdir() if p.is_dir())
        for name in names:
            self.release(name)
        with self._lock:  # the prefix group too: none outlives the server (made again on use)
            remove_empty_levels(self.root, self.base.name)
            self._ready = False
        return names
