"""Choose the isolation adapter the host supports, or the one configured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import structlog

from gpu_platform.adapters.outbound.cgroups.noop import NoopIsolation
from gpu_platform.adapters.outbound.cgroups.v1 import CgroupV1Isolation
from gpu_platform.adapters.outbound.cgroups.v2 import CgroupV2Isolation
from gpu_platform.ports.outbound.isolation import Isolation, IsolationError

__all__ = ["IsolationChoice", "detect_isolation"]

log = structlog.get_logger(__name__)

IsolationChoice = Literal["auto", "cgroup-v1", "cgroup-v2", "none"]


def detect_isolation(
    choice: IsolationChoice = "auto", root: str | Path = "/sys/fs/cgroup"
) -> Isolation:
    """auto: cgroup v2 when the unified hierarchy has controllers, else cgroup v1 when its
    hierarchies are writable (needs root), else none — each choice logged with its reason.
    An explicit choice the host cannot honour is an IsolationError."""
    root = Path(root)
    if choice == "none":
        log.warning("isolation disabled by configuration: jobs see every CPU and device")
        return NoopIsolation()
    if choice == "cgroup-v2":
        return CgroupV2Isolation(root)
    if choice == "cgroup-v1":
        return CgroupV1Isolation(root)
    controllers = root / "cgroup.controllers"
    unified = controllers.exists() and {"cpuset", "memory"} & set(controllers.read_text().split())
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
