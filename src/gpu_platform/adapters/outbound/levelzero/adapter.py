"""Intel Level Zero Sysman (pyzes): GpuDiscovery, GpuTelemetry and TopologyProbe.

pyzes 0.1.3 loads `/usr/lib/x86_64-linux-gnu/libze_loader.so.1` at import and raises OSError
without it (research/hardware.md §2.2-2.3): the import is lazy and any failure is an ABSENT
capability. Every pyzes call returns a `ze_result_t` (0 = success) and fills caller-owned
ctypes structs; ZE_RESULT_ERROR_UNSUPPORTED_FEATURE becomes NOT_SUPPORTED. Sysman has no
NUMA API, so a GPU's NUMA node is read from sysfs (`/sys/bus/pci/devices/<bdf>/numa_node`).

Calls: zesInit, zesDriverGet, zesDeviceGet (count-then-fill), zesDeviceGetProperties,
zesDevicePciGetProperties, zesDeviceEnumMemoryModules + zesMemoryGetState,
zesDeviceEnumTemperatureSensors + zesTemperatureGetState.
"""

from __future__ import annotations

import importlib
import socket
from pathlib import Path
from typing import Any

from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.telemetry import (
    Capability,
    CapabilityStatus,
    GpuReading,
    TelemetrySnapshot,
)
from gpu_platform.domain.model.topology import GpuSite, HostTopology
from gpu_platform.domain.topology.inventory import node_from_topology

__all__ = ["LevelZeroGpuDiscovery"]

_SUCCESS = 0
_UNSUPPORTED = 0x78000003
_UNINITIALIZED = 0x78000001


class _Failed(Exception):
    def __init__(self, call: str, code: int) -> None:
        super().__init__(f"{call} returned 0x{code:x}")
        self.code = code


def _check(call: str, code: int) -> None:
    if code != _SUCCESS:
        raise _Failed(call, code)


class LevelZeroGpuDiscovery:
    """Implements GpuDiscovery, GpuTelemetry and TopologyProbe over pyzes (`module` may be
    `gpu_platform.testing.fake_pyzes.FakePyzes`; None imports `pyzes` on first use).
    `sysfs_root` is where NUMA nodes of PCI functions are read."""

    name = "levelzero"

    def __init__(
        self, module: Any | None = None, *, node: str | None = None, sysfs_root: str = "/"
    ) -> None:
        self._module = module
        self._node = node or socket.gethostname()
        self._root = Path(sysfs_root)

    def _load(self) -> tuple[Any | None, Capability]:
        z = self._module
        if z is None:
            try:
                z = importlib.import_module("pyzes")
            except Exception as exc:
                return None, Capability(
                    "levelzero",
                    CapabilityStatus.ABSENT,
                    f"pyzes not importable: {type(exc).__name__}: {exc}",
                )
        code = z.zesInit(0)
        if code != _SUCCESS:
            status = (
                CapabilityStatus.ABSENT if code == _UNINITIALIZED else CapabilityStatus.DEGRADED
            )
            return None, Capability("levelzero", status, f"zesInit returned 0x{code:x}")
        return z, Capability("levelzero", CapabilityStatus.SUPPORTED)

    def capability(self) -> Capability:
        return self._load()[1]

    def _devices(self, z: Any) -> list[Any]:
        count = z.c_uint32(0)
        _check("zesDriverGet", z.zesDriverGet(z.byref(count), None))
        drivers = (z.zes_driver_handle_t * count.value)()
        _check("zesDriverGet", z.zesDriverGet(z.byref(count), drivers))
        devices: list[Any] = []
        for drv in drivers:
            n = z.c_uint32(0)
            _check("zesDeviceGet", z.zesDeviceGet(drv, z.byref(n), None))
            arr = (z.zes_device_handle_t * n.value)()
            _check("zesDeviceGet", z.zesDeviceGet(drv, z.byref(n), arr))
            devices.extend(arr)
        return devices

    def _numa(self, bdf: str) -> int:
        try:
            return int((self._root / "sys/bus/pci/devices" / bdf / "numa_node").read_text())
        except (OSError, ValueError):
            return -1

    def _site(self, z: Any, i: int, dev: Any, caps: dict[str, list[str]]) -> GpuSite:
        props = z.zes_device_properties_t()
        props.stype = z.ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES
        _check("zesDeviceGetProperties", z.zesDeviceGetProperties(dev, z.byref(props)))
        pci = z.zes_pci_properties_t()
        pci.stype = z.ZES_STRUCTURE_TYPE_PCI_PROPERTIES
        _check("zesDevicePciGetProperties", z.zesDevicePciGetProperties(dev, z.byref(pci)))
        a = pci.address
        bdf = f"{a.domain:04x}:{a.bus:02x}:{a.device:02x}.{a.function:x}"
        uuid = bytes(props.core.uuid.id).hex()
        total, _ = self._memory(z, dev, caps, i)
        return GpuSite(
            index=i,
            pci_bus_id=bdf,
            vendor=Vendor.INTEL,
            model=props.modelName.decode(errors="replace"),
            uuid=f"ZE-{uuid}",
            numa_node=self._numa(bdf),
            memory_bytes=total or 0,
        )

    def _memory(
        self, z: Any, dev: Any, caps: dict[str, list[str]], i: int
    ) -> tuple[int | None, int | None]:
        n = z.c_uint32(0)
        code = z.zesDeviceEnumMemoryModules(dev, z.byref(n), None)
        if code != _SUCCESS:
            caps.setdefault(_feature("memory", code), []).append(f"GPU {i}")
            return None, None
        mems = (z.zes_mem_handle_t * n.value)()
        z.zesDeviceEnumMemoryModules(dev, z.byref(n), mems)
        total = free = 0
        for mem in mems:
            st = z.zes_mem_state_t()
            st.stype = z.ZES_STRUCTURE_TYPE_MEM_STATE
            if z.zesMemoryGetState(mem, z.byref(st)) == _SUCCESS:
                total += st.size
                free += st.free
        return total, total - free

    def _temperature(self, z: Any, dev: Any, caps: dict[str, list[str]], i: int) -> int | None:
        n = z.c_uint32(0)
        code = z.zesDeviceEnumTemperatureSensors(dev, z.byref(n), None)
        if code != _SUCCESS or n.value == 0:
            caps.setdefault(_feature("temperature", code), []).append(f"GPU {i}")
            return None
        sensors = (z.zes_temp_handle_t * n.value)()
        z.zesDeviceEnumTemperatureSensors(dev, z.byref(n), sensors)
        best: float | None = None
        for s in sensors:
            value = z.c_double(0.0)
            if z.zesTemperatureGetState(s, z.byref(value)) == _SUCCESS:
                best = value.value if best is None else max(best, value.value)
        return None if best is None else int(best)

    def _gather(
        self, z: Any
    ) -> tuple[list[Any], list[GpuSite], dict[str, list[str]], Capability | None]:
        caps: dict[str, list[str]] = {}
        try:
            devices = self._devices(z)
            sites = [self._site(z, i, d, caps) for i, d in enumerate(devices)]
        except _Failed as exc:
            return (
                [],
                [],
                caps,
                Capability("levelzero.enumeration", CapabilityStatus.DEGRADED, str(exc)),
            )
        return devices, sites, caps, None

    def probe(self) -> HostTopology:
        z, cap = self._load()
        if z is None:
            return HostTopology(node=self._node, source=self.name, notes=(cap.detail,))
        _, sites, _, err = self._gather(z)
        notes = (err.detail,) if err else ()
        return HostTopology(node=self._node, source=self.name, gpus=tuple(sites), notes=notes)

    def discover(self) -> Inventory:
        z, cap = self._load()
        if z is None:
            empty = node_from_topology(HostTopology(node=self._node, source=self.name))
            return Inventory(
                (empty,),
                source=self.name,
                simulated=False,
                notes=(f"Level Zero unavailable: {cap.detail}",),
                capabilities=(cap,),
            )
        _, sites, caps, err = self._gather(z)
        node = node_from_topology(
            HostTopology(node=self._node, source=self.name, gpus=tuple(sites))
        )
        return Inventory(
            (node,),
            source=self.name,
            simulated=False,
            notes=(f"Level Zero: {len(node.gpus)} GPU(s)",),
            capabilities=(cap, *_caps(caps), *((err,) if err else ())),
        )

    def snapshot(self) -> TelemetrySnapshot:
        z, cap = self._load()
        if z is None:
            return TelemetrySnapshot(self._node, self.name, (), (cap,))
        devices, sites, caps, err = self._gather(z)
        readings = []
        for i, (dev, site) in enumerate(zip(devices, sites, strict=True)):
            total, used = self._memory(z, dev, caps, i)
            readings.append(
                GpuReading(
                    uuid=site.uuid,
                    index=i,
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                    temperature_c=self._temperature(z, dev, caps, i),
                )
            )
        not_read = Capability(
            "levelzero.utilization",
            CapabilityStatus.NOT_SUPPORTED,
            "engine activity needs two timed samples; this adapter takes one snapshot",
        )
        return TelemetrySnapshot(
            self._node,
            self.name,
            tuple(readings),
            (cap, not_read, *_caps(caps), *((err,) if err else ())),
        )


def _feature(name: str, code: int) -> str:
    return f"{name}:{'unsupported' if code in (_UNSUPPORTED, _SUCCESS) else hex(code)}"


def _caps(failures: dict[str, list[str]]) -> tuple[Capability, ...]:
    out = []
    for key, who in sorted(failures.items()):
        name, _, why = key.partition(":")
        status = (
            CapabilityStatus.NOT_SUPPORTED if why == "unsupported" else CapabilityStatus.DEGRADED
        )
        detail = ", ".join(sorted(set(who))) + (
            "" if status is CapabilityStatus.NOT_SUPPORTED else f" ({why})"
        )
        out.append(Capability(f"levelzero.{name}", status, detail))
    return tuple(out)
