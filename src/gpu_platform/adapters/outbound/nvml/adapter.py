"""NVIDIA NVML (nvidia-ml-py, module `pynvml`): GpuDiscovery, GpuTelemetry and TopologyProbe.

`pynvml` is imported lazily, inside the first call, and any failure (module missing,
`NVMLError_LibraryNotFound`, driver not loaded) becomes an ABSENT or DEGRADED capability,
never an exception out of the adapter. Every per-device call tolerates NotSupported (and
FunctionNotFound on old drivers): the reading is None and a capability names the GPUs.

Calls used (research/hardware.md §1): nvmlDeviceGetCount / GetHandleByIndex / GetUUID /
GetName / GetPciInfo / GetMemoryInfo (v2 for readings) / GetUtilizationRates / GetTemperatureV (or
GetTemperature) / GetPowerUsage / GetClockInfo / GetCurrentClocksEventReasons /
GetTotalEccErrors / GetRemappedRows / GetCpuAffinity / GetMemoryAffinity /
GetTopologyCommonAncestor / GetNvLinkState / GetNvLinkRemotePciInfo /
GetNvLinkRemoteDeviceType / GetMigMode / GetGpuInstanceProfileInfo.
"""

from __future__ import annotations

import importlib
import math
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.telemetry import (
    Capability,
    CapabilityStatus,
    GpuReading,
    RemappedRows,
    TelemetrySnapshot,
)
from gpu_platform.domain.model.topology import (
    FabricKind,
    GpuSite,
    HostTopology,
    Link,
    LinkLevel,
    MeasuredLevel,
    PciKind,
    PciNode,
    normalize_bus_id,
)
from gpu_platform.domain.topology.inventory import node_from_topology

__all__ = ["CLOCK_EVENT_REASONS", "NvmlGpuDiscovery"]

CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
_NOT_SUPPORTED_CODES = frozenset({3, 13, 2})  # NOT_SUPPORTED, FUNCTION_NOT_FOUND, INVALID_ARG
_ABSENT_CODES = frozenset({12, 9})  # LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED


class _Calls:
    """Runs vendor calls, turning NVML errors into per-feature capabilities."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.failures: dict[str, dict[CapabilityStatus, list[str]]] = {}
        self.features: set[str] = set()

    def __call__(self, feature: str, who: str, fn: Callable[..., Any] | str, *args: Any) -> Any:
        """Call `fn` (a pynvml function or its name: an older pynvml may lack it)."""
        self.features.add(feature)
        try:
            return (getattr(self.nvml, fn) if isinstance(fn, str) else fn)(*args)
        except Exception as exc:
            status = (
                CapabilityStatus.NOT_SUPPORTED
                if isinstance(exc, AttributeError)
                else _status_of(self.nvml, exc)
            )
            self.failures.setdefault(feature, {}).setdefault(status, []).append(
                f"{who}: {exc}" if status is CapabilityStatus.DEGRADED else who
            )
            return None

    def capabilities(self) -> tuple[Capability, ...]:
        out = []
        for feature in sorted(self.features):
            failed = self.failures.get(feature)
            if not failed:
                out.append(Capability(f"nvml.{feature}", CapabilityStatus.SUPPORTED))
                continue
            for status, who in sorted(failed.items()):
                out.append(Capability(f"nvml.{feature}", status, ", ".join(who)))
        return tuple(out)


def _status_of(nvml: Any, exc: Exception) -> CapabilityStatus:
    error_type = getattr(nvml, "NVMLError", None)
    if error_type is not None and isinstance(exc, error_type):
        code = getattr(exc, "value", None)
        if code in _NOT_SUPPORTED_CODES:
            return CapabilityStatus.NOT_SUPPORTED
    return CapabilityStatus.DEGRADED


class NvmlGpuDiscovery:
    """Implements GpuDiscovery, GpuTelemetry and TopologyProbe over NVML.

    `nvml` is the `pynvml` module or a stand-in (`gpu_platform.testing.fake_pynvml`); None
    imports `pynvml` on first use. `cpu_count` sizes the CPU affinity mask (default
    os.cpu_count()); `numa_nodes_possible` sizes the memory affinity mask.
    """

    name = "nvml"

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        node: str | None = None,
        cpu_count: int | None = None,
        numa_nodes_possible: int = 64,
    ) -> None:
        self._nvml = nvml
        self._node = node or socket.gethostname()
        self._cpu_count = cpu_count or os.cpu_count() or 64
        self._numa_possible = numa_nodes_possible

    # -- library lifecycle ----------------------------------------------------------------

    def _load(self) -> tuple[Any | None, Capability]:
        nvml = self._nvml
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except Exception as exc:
                return None, Capability(
                    "nvml", CapabilityStatus.ABSENT, f"pynvml not importable: {exc}"
                )
        try:
            nvml.nvmlInit()
        except Exception as exc:
            code = getattr(exc, "value", None)
            status = CapabilityStatus.ABSENT if code in _ABSENT_CODES else CapabilityStatus.DEGRADED
            return None, Capability("nvml", status, f"nvmlInit failed: {exc}")
        return nvml, Capability("nvml", CapabilityStatus.SUPPORTED)

    @contextmanager
    def _session(self) -> Iterator[tuple[Any | None, Capability]]:
        nvml, cap = self._load()
        try:
            yield nvml, cap
        finally:
            if nvml is not None:
                with suppress(Exception):  # a failed shutdown must not mask the result
                    nvml.nvmlShutdown()

    def capability(self) -> Capability:
        """Whether NVML loads here, without enumerating: detection uses this."""
        with self._session() as (_, cap):
            return cap

    def _handles(self, nvml: Any, calls: _Calls) -> list[Any]:
        count = calls("enumeration", "system", "nvmlDeviceGetCount") or 0
        handles = []
        for i in range(count):
            h = calls("enumeration", f"GPU {i}", "nvmlDeviceGetHandleByIndex", i)
            if h is not None:
                handles.append(h)
        return handles

    # -- TopologyProbe ----------------------------------------------------------------------

    def probe(self) -> HostTopology:
        with self._session() as (nvml, cap):
            if nvml is None:
                return HostTopology(node=self._node, source="nvml", notes=(cap.detail,))
            calls = _Calls(nvml)
            return self._topology(nvml, calls)

    def _topology(self, nvml: Any, calls: _Calls) -> HostTopology:
        handles = self._handles(nvml, calls)
        sites = [self._site(nvml, calls, i, h) for i, h in enumerate(handles)]
        measured = []
        pairs = [(a, b) for a in range(len(handles)) for b in range(a + 1, len(handles))]
        for i, j in pairs:
            level = calls(
                "topology.common_ancestor",
                f"GPU {i}-{j}",
                "nvmlDeviceGetTopologyCommonAncestor",
                handles[i],
                handles[j],
            )
            if level is not None and int(level) in LinkLevel._value2member_map_:
                measured.append(
                    MeasuredLevel(sites[i].pci_bus_id, sites[j].pci_bus_id, LinkLevel(int(level)))
                )
        links, switches = self._nvlinks(nvml, calls, handles, sites)
        notes = tuple(
            f"{c.name}: {c.status.value} ({c.detail})" for c in calls.capabilities() if not c.ok
        )
        return HostTopology(
            node=self._node,
            source="nvml",
            pci=tuple(PciNode(s, PciKind.NVSWITCH) for s in sorted(switches)),
            gpus=tuple(sites),
            links=tuple(links),
            measured_levels=tuple(measured),
            notes=notes,
        )

    def _site(self, nvml: Any, calls: _Calls, i: int, h: Any) -> GpuSite:
        who = f"GPU {i}"
        uuid = calls("identity", who, "nvmlDeviceGetUUID", h) or ""
        name = calls("identity", who, "nvmlDeviceGetName", h) or ""
        pci = calls("identity", who, "nvmlDeviceGetPciInfo", h)
        mem = calls("memory", who, "nvmlDeviceGetMemoryInfo", h)
        cpus: tuple[int, ...] = ()
        words = calls(
            "affinity.cpu", who, "nvmlDeviceGetCpuAffinity", h, math.ceil(self._cpu_count / 64)
        )
        if words is not None:
            cpus = _bits(words)
        numa = -1
        node_words = calls(
            "affinity.memory",
            who,
            "nvmlDeviceGetMemoryAffinity",
            h,
            math.ceil(self._numa_possible / 64),
            nvml.NVML_AFFINITY_SCOPE_NODE,
        )
        if node_words is not None and _bits(node_words):
            numa = _bits(node_words)[0]
        return GpuSite(
            index=i,
            pci_bus_id=normalize_bus_id(_text(pci.busId)) if pci is not None else f"unknown:{i}",
            vendor=Vendor.NVIDIA,
            model=_text(name),
            uuid=_text(uuid),
            numa_node=numa,
            memory_bytes=int(mem.total) if mem is not None else 0,
            cpus=cpus,
        )

    def _nvlinks(
        self, nvml: Any, calls: _Calls, handles: list[Any], sites: list[GpuSite]
    ) -> tuple[list[Link], set[str]]:
        counts: dict[tuple[str, str], int] = {}
        switches: set[str] = set()
        max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
        for i, h in enumerate(handles):
            for link in range(max_links):
                try:
                    state = nvml.nvmlDeviceGetNvLinkState(h, link)
                except Exception as exc:
                    if _status_of(nvml, exc) is not CapabilityStatus.NOT_SUPPORTED:
                        calls("nvlink", f"GPU {i} link {link}", _raise, exc)
                    elif link == 0:
                        calls("nvlink", f"GPU {i}", _raise, exc)
                    break
                if state != nvml.NVML_FEATURE_ENABLED:
                    continue
                remote = calls("nvlink", f"GPU {i}", "nvmlDeviceGetNvLinkRemotePciInfo", h, link)
                if remote is None:
                    continue
                bus = normalize_bus_id(_text(remote.busId))
                rtype = calls(
                    "nvlink.remote_type",
                    f"GPU {i}",
                    "nvmlDeviceGetNvLinkRemoteDeviceType",
                    h,
                    link,
                )
                if rtype == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                    switches.add(bus)
                elif rtype == getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", -1):
                    bus = "cpu:npu"
                key = (sites[i].pci_bus_id, bus)
                counts[key] = counts.get(key, 0) + 1
            calls.features.add("nvlink")
        links: list[Link] = []
        seen: set[frozenset[str]] = set()
        for (a, b), count in sorted(counts.items()):
            if b in switches or b.startswith("cpu:"):
                links.append(Link(a, b, FabricKind.NVLINK, count))
                continue
            pair = frozenset((a, b))
            if pair not in seen:  # both ends report a GPU-GPU bundle; keep it once
                seen.add(pair)
                links.append(Link(a, b, FabricKind.NVLINK, count))
        return links, switches

    # -- GpuDiscovery -----------------------------------------------------------------------

    def discover(self) -> Inventory:
        with self._session() as (nvml, cap):
            if nvml is None:
                empty = HostTopology(node=self._node, source="nvml")
                return Inventory(
                    (node_from_topology(empty),),
                    source=self.name,
                    simulated=False,
                    notes=(f"NVML unavailable: {cap.detail}",),
                    capabilities=(cap,),
                )
            calls = _Calls(nvml)
            topo = self._topology(nvml, calls)
            node = node_from_topology(topo)
            return Inventory(
                (node,),
                source=self.name,
                simulated=False,
                notes=(f"NVML: {len(node.gpus)} GPU(s)",),
                capabilities=(cap, *calls.capabilities()),
            )

    # -- GpuTelemetry -----------------------------------------------------------------------

    def snapshot(self) -> TelemetrySnapshot:
        with self._session() as (nvml, cap):
            if nvml is None:
                return TelemetrySnapshot(self._node, self.name, (), (cap,))
            calls = _Calls(nvml)
            readings = tuple(
                self._reading(nvml, calls, i, h) for i, h in enumerate(self._handles(nvml, calls))
            )
            return TelemetrySnapshot(self._node, self.name, readings, (cap, *calls.capabilities()))

    def _reading(self, nvml: Any, calls: _Calls, i: int, h: Any) -> GpuReading:
        who = f"GPU {i}"
        uuid = _text(calls("identity", who, "nvmlDeviceGetUUID", h) or f"unknown:{i}")
        util = calls("utilization", who, "nvmlDeviceGetUtilizationRates", h)
        mem = calls("memory", who, _memory_info, nvml, h)
        temp_fn = (  # nvmlDeviceGetTemperature is deprecated in NVML 13
            "nvmlDeviceGetTemperatureV"
            if hasattr(nvml, "nvmlDeviceGetTemperatureV")
            else "nvmlDeviceGetTemperature"
        )
        temp = calls("temperature", who, temp_fn, h, nvml.NVML_TEMPERATURE_GPU)
        power = calls("power", who, "nvmlDeviceGetPowerUsage", h)
        clock = calls("clocks", who, "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_SM)
        mem_clock = calls("clocks", who, "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_MEM)
        energy = calls("energy", who, "nvmlDeviceGetTotalEnergyConsumption", h)
        replays = calls("pcie_replays", who, "nvmlDeviceGetPcieReplayCounter", h)
        reasons_fn = (  # ...ThrottleReasons is the pre-12.x name
            "nvmlDeviceGetCurrentClocksEventReasons"
            if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons")
            else "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        mask = calls("clock_event_reasons", who, reasons_fn, h)
        ecc = [
            calls(
                "ecc",
                who,
                "nvmlDeviceGetTotalEccErrors",
                h,
                kind,
                nvml.NVML_VOLATILE_ECC,
            )
            for kind in (
                nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            )
        ]
        rows = calls("remapped_rows", who, "nvmlDeviceGetRemappedRows", h)
        mig = calls("mig", who, "nvmlDeviceGetMigMode", h)
        mig_on = None if mig is None else mig[0] == nvml.NVML_DEVICE_MIG_ENABLE
        return GpuReading(
            uuid=uuid,
            index=i,
            utilization_pct=int(util.gpu) if util is not None else None,
            memory_used_bytes=int(mem.used) if mem is not None else None,
            memory_total_bytes=int(mem.total) if mem is not None else None,
            temperature_c=int(temp) if temp is not None else None,
            power_mw=int(power) if power is not None else None,
            sm_clock_mhz=int(clock) if clock is not None else None,
            mem_clock_mhz=int(mem_clock) if mem_clock is not None else None,
            memory_util_pct=int(util.memory) if util is not None else None,
            energy_mj=int(energy) if energy is not None else None,
            pcie_replays=int(replays) if replays is not None else None,
            clock_event_reasons=(
                tuple(n for bit, n in CLOCK_EVENT_REASONS if int(mask) & bit)
                if mask is not None
                else None
            ),
            ecc_corrected=int(ecc[0]) if ecc[0] is not None else None,
            ecc_uncorrected=int(ecc[1]) if ecc[1] is not None else None,
            remapped_rows=(
                RemappedRows(int(rows[0]), int(rows[1]), bool(rows[2]), bool(rows[3]))
                if rows is not None
                else None
            ),
            mig_enabled=mig_on,
            mig_profiles=self._mig_profiles(nvml, calls, who, h) if mig_on else (),
        )

    def _mig_profiles(self, nvml: Any, calls: _Calls, who: str, h: Any) -> tuple[str, ...]:
        names = []
        for index in range(int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
            except Exception as exc:
                if _status_of(nvml, exc) is not CapabilityStatus.NOT_SUPPORTED:
                    calls("mig.profiles", who, _raise, exc)
                continue
            gb = round(int(info.memorySizeMB) / 1000)  # NVIDIA names: 9856 MB -> "10gb"
            names.append(f"{int(info.sliceCount)}g.{gb}gb (id {int(info.id)})")
        calls.features.add("mig.profiles")
        return tuple(names)


def _memory_info(nvml: Any, h: Any) -> Any:
    """Memory as nvidia-smi shows it: NVML's v2 call, whose `used` leaves out what the driver
    reserves for itself (v1 counts it as used: 615 MiB on an idle H200, driver 580). A
    driver or binding without v2 answers v1."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return nvml.nvmlDeviceGetMemoryInfo(h, version=version)
        except Exception as exc:
            if getattr(exc, "value", None) not in _NOT_SUPPORTED_CODES:
                raise
    return nvml.nvmlDeviceGetMemoryInfo(h)


def _raise(exc: Exception) -> None:
    raise exc


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bits(words: Any) -> tuple[int, ...]:
    """NVML affinity masks: bit i of word j is item 64*j+i."""
    out = []
    for j, word in enumerate(words):
        w = int(word)
        for i in range(64):
            if w >> i & 1:
                out.append(64 * j + i)
    return tuple(out)
