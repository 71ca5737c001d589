"""SystemdScopeIsolation: each attempt runs in a transient systemd scope on cgroup v2.

cgroup v2 has no `devices.allow`; systemd filters devices with an eBPF program it attaches to a
unit with `DevicePolicy=closed` + `DeviceAllow=`. So on a systemd host this adapter confines
by running the job under `systemd-run --scope`: the wrapper moves itself into a new scope unit
with the attempt's CPUs (`AllowedCPUs=`), NUMA memory (`AllowedMemoryNodes=`), `MemoryMax=`,
`TasksMax=` and device allow-list, then execs the job (same pid, so process-group signalling
and the parent-death signal still apply). `DevicePolicy=closed` keeps the standard pseudo
devices (null, zero, full, random, urandom, tty, ptmx) and denies every other device node.
`release` stops the scope (systemd kills what is left in it); `sweep` stops every scope of this
instance that an earlier life left.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading

import structlog

from gpu_platform.adapters.outbound.cgroups.common import cpu_list
from gpu_platform.adapters.outbound.cgroups.devices import proc_devices
from gpu_platform.ports.outbound.isolation import DeviceRule, IsolationError, IsolationSpec

__all__ = ["SystemdScopeIsolation", "device_allow"]

log = structlog.get_logger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9:_.\\-]")


def device_allow(rule: DeviceRule, majors: dict[str, int]) -> str:
    """systemd's `DeviceAllow=` value for one rule: `/dev/char/M:N` for one device node, the
    device group `char-<name>` from /proc/devices for every minor of a major."""
    kind = "char" if rule.kind == "c" else "block"
    if rule.minor is not None:
        return f"/dev/{kind}/{rule.major}:{rule.minor} {rule.access}"
    names = [name for name, major in majors.items() if major == rule.major]
    if not names:
        raise IsolationError(f"no device group for {kind} major {rule.major} in /proc/devices")
    return f"{kind}-{names[0]} {rule.access}"


class SystemdScopeIsolation:
    """Implements Isolation (and WrapsCommand) with transient systemd scopes."""

    name = "systemd"

    def __init__(
        self,
        prefix: str = "gpu-platform",
        *,
        systemd_run: str = "systemd-run",
        systemctl: str = "systemctl",
        majors: dict[str, int] | None = None,
    ) -> None:
        for tool in (systemd_run, systemctl):
            if shutil.which(tool) is None:
                raise IsolationError(f"{tool} not found: systemd isolation needs systemd")
        self._run = systemd_run
        self._ctl = systemctl
        self._majors = proc_devices() if majors is None else majors
        self._prefix = prefix
        self._props: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()
        self.limitations: tuple[str, ...] = ()

    def use_prefix(self, prefix: str) -> None:
        """Name this instance's scopes `<prefix>-<attempt>.scope` (slashes become dashes)."""
        self._prefix = prefix.replace("/", "-")

    def unit(self, name: str) -> str:
        return _UNSAFE.sub("_", f"{self._prefix}-{name}") + ".scope"

    def prepare(self, spec: IsolationSpec) -> tuple[str, ...]:
        props = []
        if spec.cpus:
            props.append(f"AllowedCPUs={cpu_list(spec.cpus)}")
        if spec.mems:
            props.append(f"AllowedMemoryNodes={cpu_list(spec.mems)}")
        if spec.memory_bytes is not None:
            props.append(f"MemoryMax={spec.memory_bytes}")
        if spec.pids_max is not None:
            props.append(f"TasksMax={spec.pids_max}")
        if spec.devices is not None:
            props.append("DevicePolicy=closed")
            props += [f"DeviceAllow={device_allow(r, self._majors)}" for r in spec.devices]
        with self._lock:
            self._props[spec.name] = tuple(props)
        return ()  # nothing to join: the wrapper puts the job into its scope

    def command_prefix(self, name: str, uid: int | None, gid: int | None) -> tuple[str, ...]:
        """The argv to put before the job's: `systemd-run --scope ... --`."""
        with self._lock:
            props = self._props.pop(name, ())
        argv = [self._run, "--scope", "--quiet", "--collect", f"--unit={self.unit(name)}"]
        if uid is not None:
            argv += [f"--uid={uid}", f"--gid={gid if gid is not None else uid}"]
        for prop in props:
            argv += ["-p", prop]
        return (*argv, "--")

    def release(self, name: str) -> None:
        with self._lock:
            self._props.pop(name, None)
        self._stop(self.unit(name))

    def _stop(self, unit: str) -> None:
        done = subprocess.run(
            [self._ctl, "stop", unit], capture_output=True, text=True, check=False
        )
        if done.returncode not in (0, 5):  # 5: no such unit (already gone)
            raise IsolationError(f"systemctl stop {unit}: {done.stderr.strip() or done.returncode}")

    def sweep(self) -> list[str]:
        done = subprocess.run(
            [self._ctl, "list-units", "--plain", "--no-legend", "--all", f"{self._prefix}-*.scope"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise IsolationError(f"systemctl list-units: {done.stderr.strip() or done.returncode}")
        units = sorted(line.split()[0] for line in done.stdout.splitlines() if line.strip())
        for unit in units:
            self._stop(unit)
        if units:
            log.warning("stopped scopes left by an earlier run", units=units)
        return units
