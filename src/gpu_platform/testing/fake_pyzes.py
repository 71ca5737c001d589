"""A fake `pyzes` module driven by a HostTopology (its Intel GPUs), for the Level Zero adapter.

Like pyzes 0.1.3 it is a ctypes-level API: functions return `ze_result_t` ints and fill
caller-allocated structs passed with `byref` (count-then-fill for handle arrays). The struct
classes are ctypes Structures with pyzes's field names for the fields the adapter reads.
`unsupported` holds function names returning ZE_RESULT_ERROR_UNSUPPORTED_FEATURE.
"""

from __future__ import annotations

import ctypes
import uuid as uuidlib
from ctypes import (
    POINTER,
    Structure,
    byref,
    c_char,
    c_double,
    c_int32,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import Any

from gpu_platform.domain.model.topology import HostTopology

__all__ = ["FakePyzes"]

ZE_RESULT_SUCCESS = 0
ZE_RESULT_ERROR_UNINITIALIZED = 0x78000001
ZE_RESULT_ERROR_UNSUPPORTED_FEATURE = 0x78000003


class ze_device_uuid_t(Structure):
    _fields_ = [("id", ctypes.c_ubyte * 16)]


class ze_device_properties_t(Structure):
    _fields_ = [
        ("stype", c_int32),
        ("pNext", c_void_p),
        ("vendorId", c_uint32),
        ("deviceId", c_uint32),
        ("uuid", ze_device_uuid_t),
        ("name", c_char * 256),
    ]


class zes_device_properties_t(Structure):
    _fields_ = [
        ("stype", c_int32),
        ("pNext", c_void_p),
        ("core", ze_device_properties_t),
        ("numSubdevices", c_uint32),
        ("modelName", c_char * 64),
    ]


class zes_pci_address_t(Structure):
    _fields_ = [
        ("domain", c_uint32),
        ("bus", c_uint32),
        ("device", c_uint32),
        ("function", c_uint32),
    ]


class zes_pci_properties_t(Structure):
    _fields_ = [("stype", c_int32), ("pNext", c_void_p), ("address", zes_pci_address_t)]


class zes_mem_state_t(Structure):
    _fields_ = [
        ("stype", c_int32),
        ("pNext", c_void_p),
        ("health", c_int32),
        ("free", c_uint64),
        ("size", c_uint64),
    ]


def _target(pointer: Any) -> Any:
    """The object behind a `byref(...)` argument."""
    return pointer._obj


class FakePyzes:
    c_uint32 = c_uint32
    c_double = c_double
    byref = staticmethod(byref)
    POINTER = staticmethod(POINTER)
    zes_driver_handle_t = c_void_p
    zes_device_handle_t = c_void_p
    zes_mem_handle_t = c_void_p
    zes_temp_handle_t = c_void_p
    zes_device_properties_t = zes_device_properties_t
    zes_pci_properties_t = zes_pci_properties_t
    zes_mem_state_t = zes_mem_state_t
    ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x1
    ZES_STRUCTURE_TYPE_PCI_PROPERTIES = 0x2
    ZES_STRUCTURE_TYPE_MEM_STATE = 0x1E
    ZE_RESULT_SUCCESS = ZE_RESULT_SUCCESS
    ZE_RESULT_ERROR_UNSUPPORTED_FEATURE = ZE_RESULT_ERROR_UNSUPPORTED_FEATURE

    def __init__(
        self,
        topology: HostTopology,
        *,
        initialises: bool = True,
        unsupported: set[str] | None = None,
    ) -> None:
        self.gpus = sorted(
            (g for g in topology.gpus if g.vendor.value == "intel"), key=lambda g: g.index
        )
        self.node = topology.node
        self.initialises = initialises
        self.unsupported = set(unsupported or ())
        self.used = [0] * len(self.gpus)

    def _fail(self, name: str) -> int:
        return (
            ZE_RESULT_ERROR_UNSUPPORTED_FEATURE if name in self.unsupported else ZE_RESULT_SUCCESS
        )

    @staticmethod
    def _fill(p_count: Any, array: Any, items: list[int]) -> None:
        count = _target(p_count)
        if array is None:
            count.value = len(items)
            return
        for i, item in enumerate(items[: count.value]):
            array[i] = item

    def zesInit(self, flags: int) -> int:
        return ZE_RESULT_SUCCESS if self.initialises else ZE_RESULT_ERROR_UNINITIALIZED

    def zesDriverGet(self, p_count: Any, drivers: Any) -> int:
        self._fill(p_count, drivers, [0x1000])
        return ZE_RESULT_SUCCESS

    def zesDeviceGet(self, driver: Any, p_count: Any, devices: Any) -> int:
        self._fill(p_count, devices, [0x2000 + i for i in range(len(self.gpus))])
        return ZE_RESULT_SUCCESS

    def _gpu(self, handle: int) -> Any:
        return self.gpus[handle - 0x2000]

    def zesDeviceGetProperties(self, dev: int, p_props: Any) -> int:
        props = _target(p_props)
        g = self._gpu(dev)
        props.modelName = g.model.encode()[:63]
        props.core.vendorId = 0x8086
        raw = uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{self.node}/{g.pci_bus_id}").bytes
        for i, b in enumerate(raw):
            props.core.uuid.id[i] = b
        props.numSubdevices = 0
        return self._fail("zesDeviceGetProperties")

    def zesDevicePciGetProperties(self, dev: int, p_props: Any) -> int:
        props = _target(p_props)
        domain, bus, devfn = self._gpu(dev).pci_bus_id.split(":")
        device, function = devfn.split(".")
        props.address.domain = int(domain, 16)
        props.address.bus = int(bus, 16)
        props.address.device = int(device, 16)
        props.address.function = int(function, 16)
        return self._fail("zesDevicePciGetProperties")

    def zesDeviceEnumMemoryModules(self, dev: int, p_count: Any, mems: Any) -> int:
        if "zesDeviceEnumMemoryModules" in self.unsupported:
            return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE
        self._fill(p_count, mems, [dev])
        return ZE_RESULT_SUCCESS

    def zesMemoryGetState(self, mem: int, p_state: Any) -> int:
        st = _target(p_state)
        g = self._gpu(mem)
        st.size = g.memory_bytes
        st.free = g.memory_bytes - self.used[self.gpus.index(g)]
        return ZE_RESULT_SUCCESS

    def zesDeviceEnumTemperatureSensors(self, dev: int, p_count: Any, sensors: Any) -> int:
        if "zesDeviceEnumTemperatureSensors" in self.unsupported:
            return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE
        self._fill(p_count, sensors, [dev, dev])
        return ZE_RESULT_SUCCESS

    def zesTemperatureGetState(self, sensor: int, p_temp: Any) -> int:
        _target(p_temp).value = 41.5
        return ZE_RESULT_SUCCESS
