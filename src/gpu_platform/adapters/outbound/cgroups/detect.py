"""Choose the isolation adapter the host supports, or the one configured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import structlog

from gpu_platform.adapters.outbound.cgroups.noop import NoopIsolation
from gpu_platform.adapters.outbound.cgroups.systemd import SystemdScopeIsolation
from gpu_platform.adapters.outbound.cgroups.v1 import CgroupV1Isolation
from gpu_platform.adapters.outbound.cgroups.v2 import CgroupV2Isolation
from gpu_platform.ports.outbound.isolation import Isolation, IsolationError

__all__ = ["IsolationChoice", "detect_isolation"]

log = structlog.get_logger(__name__)

IsolationChoice = Literal["auto", "systemd", "cgroup-v1", "cgroup-v2", "none"]


def systemd_running(run_dir: str | Path = "/run/systemd/system") -> bool:
    """sd_booted(): systemd is PID 1 exactly when this directory exists."""
    return Path(run_dir).is_dir()


def detect_isolation(
    choice: IsolationChoice = "auto",
    root: str | Path = "/sys/fs/cgroup",
    systemd_dir: str | Path = "/run/systemd/system",
) -> Isolation:
    """auto: on a cgroup v2 host run by systemd, transient systemd scopes (the only way to
    filter devices on v2); else cgroup v2 when the unified hierarchy has controllers, else
    cgroup v1 when its hierarchies are writable (needs root), else none — each choice logged
    with its reason. An explicit choice the host cannot honour is an IsolationError."""
    root = Path(root)
    if choice == "none":
        log.warning("isolation disabled by configuration: jobs see every CPU and device")
        return NoopIsolation()
    if choice == "systemd":
        if not systemd_running(systemd_dir):
            raise IsolationError("isolation=systemd but systemd is not running (PID 1)")
        return SystemdScopeIsolation()
    if choice == "cgroup-v2":
        return CgroupV2Isolation(root)
    if choice == "cgroup-v1":
        return CgroupV1Isolation(root)
    controllers = root / "cgroup.controllers"
    unified = controllers.exists() and {"cpuset", "memory"} & set(controllers.read_text().split())
    if unified and systemd_running(systemd_dir) and os.geteuid() == 0:
        try:
            scopes = SystemdScopeIsolation()
        except IsolationError as exc:
            log.warning("systemd scopes unusable", reason=str(exc))
        else:
            log.info("isolation: systemd scopes on cgroup v2 (devices filtered)")
            return scopes
    if unified and os.access(root, os.W_OK):
        log.info("isolation: cgroup v2", root=str(root))
        return CgroupV2Isolation(root)
    if (root / "cpuset").is_dir() and os.access(root / "cpuset", os.W_OK):
        try:
            isolation = CgroupV1Isolation(root)
        except IsolationError as exc:
            log.warning("cgroup v1 unusable", reason=str(exc))
        else:
            log.info("isolation: cgroup v1", controllers=list(isolation.controllers))
            return isolation
    log.warning(
        "isolation: none (no writable cgroup hierarchy; run as root for cgroup isolation)",
        root=str(root),
    )
    return NoopIsolation()
