"""A fake Linux sysfs tree on disk, for the sysfs adapter's tests and contract runs.

    fs = FakeSysfs(tmp_path)
    fs.numa(0, "0-3", mem_kib=1 << 20, distance=[10, 21])
    fs.pci(["0000:00:01.0", "0000:01:00.0"], cls=0x030200, vendor=0x10DE, device=0x20B0, numa=0)
    fs.infiniband("mlx5_0", "0000:01:00.1")

PCI functions are real directories under `sys/devices/pci<domain>:<bus>/...` with the
`sys/bus/pci/devices/<bdf>` symlinks the kernel makes, so the adapter's realpath logic runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["FakeSysfs", "two_socket_gpu_host"]

_BRIDGE = 0x060400


class FakeSysfs:
    def __init__(self, root: Path, hostname: str = "fakehost") -> None:
        self.root = root
        (root / "sys/devices/system/node").mkdir(parents=True, exist_ok=True)
        (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
        (root / "proc/sys/kernel/hostname").write_text(hostname + "\n")

    def numa(self, node: int, cpulist: str, *, mem_kib: int = 0, distance: Sequence[int]) -> None:
        d = self.root / f"sys/devices/system/node/node{node}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(cpulist + "\n")
        (d / "meminfo").write_text(f"Node {node} MemTotal:       {mem_kib} kB\n")
        (d / "distance").write_text(" ".join(map(str, distance)) + "\n")

    def cpu(self, cpu: int, package: int) -> None:
        d = self.root / f"sys/devices/system/cpu/cpu{cpu}/topology"
        d.mkdir(parents=True, exist_ok=True)
        (d / "physical_package_id").write_text(f"{package}\n")

    def pci(
        self,
        path: Sequence[str],
        *,
        cls: int,
        vendor: int,
        device: int,
        numa: int = -1,
    ) -> Path:
        """Create function `path[-1]` below bridges `path[:-1]` (created as bridges if new)."""
        domain_bus = path[0][:7]
        cur = self.root / f"sys/devices/pci{domain_bus}"
        for i, bdf in enumerate(path):
            cur = cur / bdf
            last = i == len(path) - 1
            if not cur.exists() or last:
                cur.mkdir(parents=True, exist_ok=True)
                if last:
                    self._write_function(cur, cls, vendor, device, numa)
                else:
                    self._write_function(cur, _BRIDGE, 0x10B5, 0x8747, numa)
                link = self.root / "sys/bus/pci/devices" / bdf
                if not link.is_symlink():
                    os.symlink(os.path.relpath(cur, link.parent), link)
        return cur

    @staticmethod
    def _write_function(d: Path, cls: int, vendor: int, device: int, numa: int) -> None:
        (d / "class").write_text(f"0x{cls:06x}\n")
        (d / "vendor").write_text(f"0x{vendor:04x}\n")
        (d / "device").write_text(f"0x{device:04x}\n")
        (d / "numa_node").write_text(f"{numa}\n")

    def _function_dir(self, bdf: str) -> Path:
        return Path(os.path.realpath(self.root / "sys/bus/pci/devices" / bdf))

    def infiniband(
        self, name: str, bdf: str, *, state: str = "4: ACTIVE", link_layer: str = "InfiniBand"
    ) -> None:
        d = self.root / "sys/class/infiniband" / name
        (d / "ports/1").mkdir(parents=True, exist_ok=True)
        (d / "ports/1/state").write_text(state + "\n")
        (d / "ports/1/link_layer").write_text(link_layer + "\n")
        os.symlink(os.path.relpath(self._function_dir(bdf), d), d / "device")

    def net(self, name: str, bdf: str) -> None:
        d = self.root / "sys/class/net" / name
        d.mkdir(parents=True, exist_ok=True)
        fn = self._function_dir(bdf)
        (fn / "net" / name).mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(fn, d), d / "device")


def two_socket_gpu_host(root: Path) -> FakeSysfs:
    """2 sockets x 4 CPUs, one NUMA node each; per socket one PCIe switch holding two NVIDIA
    A100s and one ConnectX NIC (mlx5_0 on socket 0, mlx5_1 on socket 1), plus a BMC VGA."""
    fs = FakeSysfs(root)
    fs.numa(0, "0-3", mem_kib=64 << 20, distance=[10, 21])
    fs.numa(1, "4-7", mem_kib=64 << 20, distance=[21, 10])
    for cpu in range(8):
        fs.cpu(cpu, cpu // 4)
    for sock, bus in ((0, 0x00), (1, 0x80)):
        rp = f"0000:{bus:02x}:01.0"
        up = f"0000:{bus + 1:02x}:00.0"
        for port, kind in enumerate(("gpu", "gpu", "nic")):
            down = f"0000:{bus + 2:02x}:{port:02x}.0"
            fn = f"0000:{bus + 3 + port:02x}:00.0"
            path = [rp, up, down, fn]
            if kind == "gpu":
                fs.pci(path, cls=0x030200, vendor=0x10DE, device=0x20B0, numa=sock)
            else:
                fs.pci(path, cls=0x020700, vendor=0x15B3, device=0x101B, numa=sock)
                fs.infiniband(f"mlx5_{sock}", fn)
    fs.pci(["0000:00:1c.0", "0000:09:00.0"], cls=0x030000, vendor=0x1A03, device=0x2000, numa=0)
    return fs
