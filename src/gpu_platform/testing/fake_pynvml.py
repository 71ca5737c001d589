"""A fake `pynvml` module driven by a HostTopology, so the real NVML adapter runs in CI.

    nvml = FakePynvml(profile_topology("dgx-a100"), not_supported={"nvmlDeviceGetUtilizationRates"})
    NvmlGpuDiscovery(nvml).discover()

What it models (names, constants and return shapes follow nvidia-ml-py 13): init/shutdown
(with `library_present=False` → NVMLError_LibraryNotFound, value 12), enumeration, UUID, name,
PCI info (`busId` in NVML's `00000000:BB:DD.F` form), memory, utilization, temperature,
power, SM clock, clock-event reasons, ECC totals, remapped rows, CPU and memory affinity,
common-ancestor level (computed from the topology's PCIe tree), NVLink state / remote PCI
info / remote device type (one link slot per link of each `Link`, NVSwitch remotes typed
SWITCH), MIG mode and the A100/H100 GPU-instance profile tables.

`not_supported` holds function names, or (function name, GPU index) pairs, that raise
NVMLError_NotSupported (value 3) — the way MIG-mode GPUs refuse utilization.
`lost` holds GPU indices whose every call raises NVMLError_GpuIsLost (value 15).

Events (research/hardware.md §1.3): nvmlEventSetCreate / nvmlDeviceGetSupportedEventTypes /
nvmlDeviceRegisterEvents / nvmlEventSetWait (blocks up to its timeout, then raises
NVMLError_Timeout, value 10) / nvmlEventSetFree. Tests fire events with
`fire_event(gpu_index, event_type, data)`; each event set that registered that GPU for that
type receives `SimpleNamespace(device, eventType, eventData, gpuInstanceId, computeInstanceId)`.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from gpu_platform.domain.model.topology import HostTopology, LinkLevel, PciKind, normalize_bus_id
from gpu_platform.domain.topology.pcie import PciIndex

__all__ = ["FakeGpuState", "FakePynvml", "NVMLError"]


class NVMLError(Exception):
    """As pynvml.NVMLError: `.value` is the NVML_ERROR_* code."""

    _messages = {
        2: "Invalid Argument",
        3: "Not Supported",
        10: "Timeout",
        12: "NVML Shared Library Not Found",
        15: "GPU is lost",
    }

    def __init__(self, value: int) -> None:
        super().__init__(self._messages.get(value, f"NVML error {value}"))
        self.value = value


class NVMLError_InvalidArgument(NVMLError):
    def __init__(self) -> None:
        super().__init__(2)


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__(3)


class NVMLError_Timeout(NVMLError):
    def __init__(self) -> None:
        super().__init__(10)


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self) -> None:
        super().__init__(12)


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self) -> None:
        super().__init__(15)


# (profile index, slices, memory MB) for 7-slice GPUs, from go-nvml's a100.go / h100.go.
_MIG_PROFILES = {
    40: [(0, 1, 4864), (9, 1, 9856), (1, 2, 9856), (2, 3, 19968), (3, 4, 19968), (4, 7, 40192)],
    80: [(0, 1, 9856), (9, 1, 19968), (1, 2, 19968), (2, 3, 40192), (3, 4, 40192), (4, 7, 80384)],
}
_PROFILE_IDS = {0: 19, 9: 15, 1: 14, 2: 9, 3: 5, 4: 0}


@dataclass
class _FakeEventSet:
    registered: dict[int, int] = field(default_factory=dict)  # handle -> event mask
    events: queue.Queue[Any] = field(default_factory=queue.Queue)
    freed: bool = False


@dataclass
class FakeGpuState:
    """Mutable readings of one fake GPU (tests change them between snapshots)."""

    utilization: int = 0
    memory_used: int = 0
    memory_reserved: int = 0  # the driver's own; NVML v1 counts it as used, v2 apart
    temperature: int = 30
    power_mw: int = 60_000
    sm_clock: int = 1410
    mem_clock: int = 1593
    memory_util: int = 0
    energy_mj: int = 0
    pcie_replays: int = 0
    clock_reasons: int = 0x1
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    mig: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class FakePynvml:
    """Module-like stand-in for `pynvml` over one host's topology (NVIDIA GPUs only)."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_Timeout = NVMLError_Timeout
    NVML_ERROR_TIMEOUT = 10
    nvmlEventTypeSingleBitEccError = 0x1
    nvmlEventTypeDoubleBitEccError = 0x2
    nvmlEventTypeXidCriticalError = 0x8
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_TEMPERATURE_GPU = 0
    nvmlMemory_v2 = 0x02000028
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_AFFINITY_SCOPE_NODE = 0
    NVML_AFFINITY_SCOPE_SOCKET = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_DEVICE_TYPE_GPU = 0
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
    NVML_TOPOLOGY_INTERNAL = 0
    NVML_TOPOLOGY_SINGLE = 10
    NVML_TOPOLOGY_MULTIPLE = 20
    NVML_TOPOLOGY_HOSTBRIDGE = 30
    NVML_TOPOLOGY_NODE = 40
    NVML_TOPOLOGY_SYSTEM = 50

    def __init__(
        self,
        topology: HostTopology,
        *,
        library_present: bool = True,
        not_supported: set[str] | set[str | tuple[str, int]] | None = None,
        lost: set[int] | None = None,
    ) -> None:
        self.topology = topology
        self.gpus = sorted(
            (g for g in topology.gpus if g.vendor.value == "nvidia"), key=lambda g: g.index
        )
        self.state = [FakeGpuState(memory_used=0) for _ in self.gpus]
        self.library_present = library_present
        self.not_supported: set[Any] = set(not_supported or ())
        self.lost = set(lost or ())
        self.initialised = 0
        self.calls: list[str] = []
        self._index = PciIndex(topology)
        self._slots = self._link_slots()
        self.event_sets: list[_FakeEventSet] = []
        self.supported_events = 0x1 | 0x2 | 0x8

    # -- helpers ----------------------------------------------------------------------------

    def _link_slots(self) -> dict[int, list[tuple[str, int]]]:
        switches = {normalize_bus_id(p.id) for p in self.topology.pci if p.kind is PciKind.NVSWITCH}
        by_bus = {normalize_bus_id(g.pci_bus_id): g.index for g in self.gpus}
        slots: dict[int, list[tuple[str, int]]] = {g.index: [] for g in self.gpus}
        for link in self.topology.links:
            ends = [normalize_bus_id(link.a), normalize_bus_id(link.b)]
            for mine, other in (ends, ends[::-1]):
                if mine not in by_bus:
                    continue
                if other in switches:
                    rtype = self.NVML_NVLINK_DEVICE_TYPE_SWITCH
                elif other.startswith("cpu:"):
                    rtype = self.NVML_NVLINK_DEVICE_TYPE_IBMNPU
                else:
                    rtype = self.NVML_NVLINK_DEVICE_TYPE_GPU
                slots[by_bus[mine]].extend([(other, rtype)] * link.count)
        return slots

    def _enter(self, name: str, handle: int | None = None) -> None:
        self.calls.append(name)
        if not self.initialised:
            raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED
        if name in self.not_supported or (name, handle) in self.not_supported:
            raise NVMLError_NotSupported()
        if handle is not None and handle in self.lost:
            raise NVMLError_GpuIsLost()

    def _gpu(self, handle: int) -> Any:
        return next(g for g in self.gpus if g.index == handle)

    @staticmethod
    def _nvml_bus(bus: str) -> str:
        domain, rest = bus.split(":", 1)
        return f"0000{domain}:{rest}".upper()

    # -- system -----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if not self.library_present:
            raise NVMLError_LibraryNotFound()
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        return self.gpus[index].index

    def nvmlDeviceGetIndex(self, h: int) -> int:
        self._enter("nvmlDeviceGetIndex", h)
        return self.gpus.index(self._gpu(h))

    # -- identity and telemetry ---------------------------------------------------------------

    def nvmlDeviceGetUUID(self, h: int) -> str:
        self._enter("nvmlDeviceGetUUID", h)
        return self._gpu(h).uuid or f"GPU-fake-{self.topology.node}-{h}"

    def nvmlDeviceGetName(self, h: int) -> str:
        self._enter("nvmlDeviceGetName", h)
        return f"NVIDIA {self._gpu(h).model}"

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        self._enter("nvmlDeviceGetPciInfo", h)
        bus = self._gpu(h).pci_bus_id
        return SimpleNamespace(busId=self._nvml_bus(bus), pciDeviceId=0x20B010DE)

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo", h)
        total = self._gpu(h).memory_bytes
        st = self._st(h)
        if version is None:  # v1: the driver's reserved memory counted as used
            used = st.memory_used + st.memory_reserved
            return SimpleNamespace(total=total, used=used, free=total - used)
        if version != self.nvmlMemory_v2:
            raise NVMLError_InvalidArgument()
        free = total - st.memory_reserved - st.memory_used
        return SimpleNamespace(
            version=version, total=total, reserved=st.memory_reserved, free=free,
            used=st.memory_used,
        )  # fmt: skip

    def _st(self, h: int) -> FakeGpuState:
        return self.state[self.gpus.index(self._gpu(h))]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", h)
        if self._st(h).mig:
            raise NVMLError_NotSupported()  # nvml.h: not supported on MIG-enabled GPUs
        return SimpleNamespace(gpu=self._st(h).utilization, memory=self._st(h).memory_util)

    def nvmlDeviceGetTemperatureV(self, h: int, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperatureV", h)
        return self._st(h).temperature

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._enter("nvmlDeviceGetPowerUsage", h)
        return self._st(h).power_mw

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", h)
        return self._st(h).mem_clock if clock == self.NVML_CLOCK_MEM else self._st(h).sm_clock

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption", h)
        return self._st(h).energy_mj

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        self._enter("nvmlDeviceGetPcieReplayCounter", h)
        return self._st(h).pcie_replays

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", h)
        return self._st(h).clock_reasons

    def nvmlDeviceGetTotalEccErrors(self, h: int, error_type: int, counter: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors", h)
        st = self._st(h)
        return st.ecc_corrected if error_type == 0 else st.ecc_uncorrected

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        self._enter("nvmlDeviceGetRemappedRows", h)
        if self._st(h).mig:
            raise NVMLError_NotSupported()  # nvml.h: not supported if MIG is enabled
        return self._st(h).remapped

    # -- events -----------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> _FakeEventSet:
        self._enter("nvmlEventSetCreate")
        es = _FakeEventSet()
        self.event_sets.append(es)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, h: int) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes", h)
        return self.supported_events

    def nvmlDeviceRegisterEvents(self, h: int, mask: int, es: _FakeEventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents", h)
        es.registered[h] = es.registered.get(h, 0) | mask

    def nvmlEventSetWait(self, es: _FakeEventSet, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait")
        try:
            return es.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError_Timeout() from None

    def nvmlEventSetFree(self, es: _FakeEventSet) -> None:
        self._enter("nvmlEventSetFree")
        es.freed = True

    def fire_event(self, gpu_index: int, event_type: int, data: int = 0) -> int:
        """Deliver an event to every set that registered `gpu_index` for `event_type`;
        return how many sets received it."""
        handle = self.gpus[gpu_index].index
        event = SimpleNamespace(
            device=handle,
            eventType=event_type,
            eventData=data,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )
        delivered = 0
        for es in self.event_sets:
            if not es.freed and es.registered.get(handle, 0) & event_type:
                es.events.put(event)
                delivered += 1
        return delivered

    # -- affinity and topology --------------------------------------------------------------

    def nvmlDeviceGetCpuAffinity(self, h: int, words: int) -> list[int]:
        self._enter("nvmlDeviceGetCpuAffinity", h)
        numa = self._index.numa_of(self._gpu(h).pci_bus_id)
        numa = numa if numa >= 0 else self._gpu(h).numa_node
        cpus = next((n.cpus for n in self.topology.numa_nodes if n.id == numa), ())
        return _mask(cpus, words)

    def nvmlDeviceGetMemoryAffinity(self, h: int, words: int, scope: int) -> list[int]:
        self._enter("nvmlDeviceGetMemoryAffinity", h)
        numa = self._gpu(h).numa_node
        return _mask((numa,) if numa >= 0 else (), words)

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: int, h2: int) -> int:
        self._enter("nvmlDeviceGetTopologyCommonAncestor", h1)
        a, b = self._gpu(h1), self._gpu(h2)
        level = self._index.level(a.pci_bus_id, b.pci_bus_id, a.numa_node, b.numa_node)
        return int(level if level is not LinkLevel.SAME_BOARD or h1 != h2 else 0)

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState", h)
        slots = self._slots[h]
        if not slots:
            raise NVMLError_NotSupported()  # a PCIe-only GPU
        if link >= len(slots):
            raise NVMLError_InvalidArgument()
        return self.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo", h)
        bus, _ = self._slots[h][link]
        return SimpleNamespace(busId=self._nvml_bus(bus) if not bus.startswith("cpu:") else bus)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType", h)
        return self._slots[h][link][1]

    # -- MIG --------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        self._enter("nvmlDeviceGetMigMode", h)
        model = self._gpu(h).model
        if not any(k in model for k in ("A100", "A30", "H100", "H200")):
            raise NVMLError_NotSupported()
        mode = int(self._st(h).mig)
        return mode, mode

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: int, profile: int) -> Any:
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo", h)
        if not self._st(h).mig:
            raise NVMLError_NotSupported()
        size = 80 if self._gpu(h).memory_bytes > 48 << 30 else 40
        for index, slices, mem_mb in _MIG_PROFILES[size]:
            if index == profile:
                return SimpleNamespace(
                    id=_PROFILE_IDS[index],
                    sliceCount=slices,
                    memorySizeMB=mem_mb,
                    instanceCount=7 // slices if slices < 7 else 1,
                )
        raise NVMLError_NotSupported()


def _mask(items: tuple[int, ...], words: int) -> list[int]:
    out = [0] * max(words, 1)
    for i in items:
        if i // 64 < len(out):
            out[i // 64] |= 1 << (i % 64)
    return out
