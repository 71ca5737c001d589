"""Isolation adapters: cgroup v1, cgroup v2, systemd scopes, none; and host detection."""

from gpu_platform.adapters.outbound.cgroups.detect import detect_isolation
from gpu_platform.adapters.outbound.cgroups.devices import gpu_device_rules
from gpu_platform.adapters.outbound.cgroups.noop import NoopIsolation
from gpu_platform.adapters.outbound.cgroups.systemd import SystemdScopeIsolation
from gpu_platform.adapters.outbound.cgroups.v1 import CgroupV1Isolation
from gpu_platform.adapters.outbound.cgroups.v2 import CgroupV2Isolation

__all__ = [
    "CgroupV1Isolation",
    "CgroupV2Isolation",
    "NoopIsolation",
    "SystemdScopeIsolation",
    "detect_isolation",
    "gpu_device_rules",
]
