"""CgroupV1Isolation: one group per attempt in each of the cpuset, memory, pids and devices
hierarchies, under `<root>/<controller>/<prefix>/<attempt>`. `sweep()` (at start and at
shutdown) removes every attempt group and then the prefix groups themselves when empty.

cpuset needs `cpuset.cpus` and `cpuset.mems` on every level before a task may join, so the
prefix group inherits the root's effective sets. Devices are an allow-list: `devices.deny a`,
then `devices.allow` for the basics every process needs (null, zero, full, random, urandom,
tty, ptmx, pts) and the job's own device nodes; all other devices — other jobs' GPUs included —
cannot be opened.

A CPU request (`IsolationSpec.cpu_milli`) is the CFS quota of the attempt's group in the `cpu`
hierarchy (`cpu.cfs_quota_us` per `cpu.cfs_period_us` of 100 ms), when that hierarchy exists.
"""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from gpu_platform.adapters.outbound.cgroups.common import (
    cpu_list,
    empty_and_remove,
    parse_list,
    remove_empty_levels,
    write,
)
from gpu_platform.ports.outbound.isolation import DeviceRule, IsolationError, IsolationSpec

__all__ = ["BASE_DEVICES", "CONTROLLERS", "CgroupV1Isolation"]

log = structlog.get_logger(__name__)

CONTROLLERS = ("cpuset", "cpu", "memory", "pids", "devices")
CFS_PERIOD_US = 100_000  # the CPU quota's period: cpu_milli milli-cores = cpu_milli*100 us

BASE_DEVICES = (
    DeviceRule("c", 1, 3),  # null
    DeviceRule("c", 1, 5),  # zero
    DeviceRule("c", 1, 7),  # full
    DeviceRule("c", 1, 8),  # random
    DeviceRule("c", 1, 9),  # urandom
    DeviceRule("c", 5, 0),  # tty
    DeviceRule("c", 5, 2),  # ptmx
    DeviceRule("c", 136, None),  # pts
    DeviceRule("c", 0, None, "m"),  # mknod is harmless without open
)


class CgroupV1Isolation:
    """Implements Isolation on cgroup v1 hierarchies (those present and writable)."""

    name = "cgroup-v1"

    def __init__(
        self,
        root: str | Path = "/sys/fs/cgroup",
        prefix: str = "gpu-platform",
        controllers: tuple[str, ...] = CONTROLLERS,
    ) -> None:
        self.root = Path(root)
        self.prefix = prefix
        self.controllers = tuple(c for c in controllers if (self.root / c).is_dir())
        if not self.controllers:
            raise IsolationError(f"no cgroup v1 hierarchy of {controllers} under {self.root}")
        self._lock = threading.Lock()
        self._ready = False

    def use_prefix(self, prefix: str) -> None:
        """Place this adapter's groups under `prefix` (a relative path) instead."""
        self.prefix = prefix
        self._ready = False

    def _base(self, controller: str) -> Path:
        return self.root / controller / self.prefix

    def _setup(self) -> None:
        if self._ready:
            return
        for controller in self.controllers:
            level = self.root / controller
            for part in Path(self.prefix).parts:  # e.g. gpu-platform/<instance>
                parent, level = level, level / part
                try:
                    level.mkdir(exist_ok=True)
                except OSError as exc:
                    raise IsolationError(f"cannot create {level}: {exc.strerror or exc}") from exc
                if controller == "cpuset":
                    for name in ("cpuset.cpus", "cpuset.mems"):
                        if not (level / name).read_text().strip():
                            write(level / name, _effective(parent, name))
        self._ready = True

    def host_cpus(self) -> set[int]:
        return parse_list(_effective(self.root / "cpuset", "cpuset.cpus"))

    def host_mems(self) -> set[int]:
        return parse_list(_effective(self.root / "cpuset", "cpuset.mems"))

    def prepare(self, spec: IsolationSpec) -> tuple[str, ...]:
        with self._lock:
            self._setup()
            joins = []
            try:
                for controller in self.controllers:
                    group = self._base(controller) / spec.name
                    group.mkdir(exist_ok=True)
                    getattr(self, f"_configure_{controller}")(group, spec)
                    joins.append(str(group / "cgroup.procs"))
            except (OSError, IsolationError) as exc:
                self._remove(spec.name)
                if isinstance(exc, IsolationError):
                    raise
                raise IsolationError(f"cgroup v1 set-up for {spec.name}: {exc}") from exc
            return tuple(joins)

    def _configure_cpuset(self, group: Path, spec: IsolationSpec) -> None:
        parent = group.parent
        if spec.cpus:
            missing = set(spec.cpus) - self.host_cpus()
            if missing:
                raise IsolationError(
                    f"cannot pin to CPUs {sorted(missing)}: this host has "
                    f"{cpu_list(tuple(self.host_cpus()))}"
                )
        if spec.mems:
            missing = set(spec.mems) - self.host_mems()
            if missing:
                raise IsolationError(
                    f"cannot bind memory to NUMA nodes {sorted(missing)}: this host has "
                    f"{cpu_list(tuple(self.host_mems()))}"
                )
        cpus = cpu_list(spec.cpus) if spec.cpus else (parent / "cpuset.cpus").read_text().strip()
        mems = cpu_list(spec.mems) if spec.mems else (parent / "cpuset.mems").read_text().strip()
        write(group / "cpuset.cpus", cpus)
        write(group / "cpuset.mems", mems)

    def _configure_cpu(self, group: Path, spec: IsolationSpec) -> None:
        if spec.cpu_milli:  # CFS bandwidth: cpu_milli/1000 CPUs' worth of time per period
            write(group / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            write(group / "cpu.cfs_quota_us", str(spec.cpu_milli * CFS_PERIOD_US // 1000))

    def _configure_memory(self, group: Path, spec: IsolationSpec) -> None:
        if spec.memory_bytes is not None:
            write(group / "memory.limit_in_bytes", str(spec.memory_bytes))

    def _configure_pids(self, group: Path, spec: IsolationSpec) -> None:
        if spec.pids_max is not None:
            write(group / "pids.max", str(spec.pids_max))

    def _configure_devices(self, group: Path, spec: IsolationSpec) -> None:
        if spec.devices is None:
            return
        write(group / "devices.deny", "a")
        for rule in (*BASE_DEVICES, *spec.devices):
            write(group / "devices.allow", rule.v1())

    def release(self, name: str) -> None:
        with self._lock:
            self._remove(name)

    def _remove(self, name: str) -> None:
        errors = []
        for controller in self.controllers:
            try:
                empty_and_remove(self._base(controller) / name)
            except IsolationError as exc:
                errors.append(str(exc))
        if errors:
            raise IsolationError("; ".join(errors))

    def sweep(self) -> list[str]:
        names: set[str] = set()
        for controller in self.controllers:
            base = self._base(controller)
            if base.is_dir():
                names.update(p.name for p in base.iterdir() if p.is_dir())
        for name in sorted(names):
            self.release(name)
        if names:
            log.warning("removed leftover cgroups", names=sorted(names))
        with self._lock:  # the prefix groups too: none outlives the server (made again on use)
            for controller in self.controllers:
                remove_empty_levels(self.root / controller, self.prefix)
            self._ready = False
        return sorted(names)


def _effective(top: Path, name: str) -> str:
    effective = top / name.replace("cpuset.", "cpuset.effective_")
    path = effective if effective.exists() else top / name
    return path.read_text().strip()
