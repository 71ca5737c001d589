"""Device nodes a job may open, per vendor: NVIDIA (/dev/nvidiaN, nvidiactl, nvidia-uvm),
AMD (/dev/kfd, /dev/dri card and render nodes), Intel (/dev/dri card and render nodes).
Dynamic majors (nvidia-uvm, kfd) are read from /proc/devices."""

from __future__ import annotations

from pathlib import Path

from gpu_platform.ports.outbound.isolation import DeviceRule

__all__ = ["NVIDIA_MAJOR", "gpu_device_rules", "proc_devices"]

NVIDIA_MAJOR = 195
DRM_MAJOR = 226


def proc_devices(path: str | Path = "/proc/devices") -> dict[str, int]:
    """Character device names to majors."""
    out: dict[str, int] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        if line.strip() == "Block devices:":
            break
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            out[parts[1]] = int(parts[0])
    return out


def gpu_device_rules(
    vendor: str, indices: tuple[int, ...], majors: dict[str, int] | None = None
) -> tuple[DeviceRule, ...]:
    """The device rules that let a job use GPUs `indices` of `vendor`, and nothing more."""
    majors = proc_devices() if majors is None else majors
    if not indices:
        return ()
    if vendor == "nvidia":
        rules = [DeviceRule("c", NVIDIA_MAJOR, i) for i in indices]
        rules += [DeviceRule("c", NVIDIA_MAJOR, 255), DeviceRule("c", NVIDIA_MAJOR, 254)]
        for name in ("nvidia-uvm", "nvidia-caps"):
            if name in majors:
                rules.append(DeviceRule("c", majors[name], None))
        return tuple(rules)
    rules = [DeviceRule("c", DRM_MAJOR, i) for i in indices]
    rules += [DeviceRule("c", DRM_MAJOR, 128 + i) for i in indices]
    if vendor == "amd" and "kfd" in majors:
        rules.append(DeviceRule("c", majors["kfd"], None))
    return tuple(rules)
