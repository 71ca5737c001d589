"""AMD amdsmi: GpuDiscovery, GpuTelemetry and TopologyProbe.

`import amdsmi` without ROCm's libamd_smi.so prints two lines to stdout and raises
KeyError('libamd_smi.so') (research/hardware.md §2.3), so the import runs lazily, with stdout
captured, inside `except Exception`; any failure is an ABSENT capability. Calls that raise
AmdSmiLibraryException with AMDSMI_STATUS_NOT_SUPPORTED (2) become NOT_SUPPORTED
capabilities; values reported as "N/A" become None.

Calls: amdsmi_init(AmdSmiInitFlags.INIT_AMD_GPUS), amdsmi_get_processor_handles,
amdsmi_get_gpu_device_bdf / _uuid, amdsmi_get_gpu_asic_info, amdsmi_get_gpu_vram_usage (MB),
amdsmi_topo_get_numa_node_number, amdsmi_topo_get_link_type (XGMI, hops),
amdsmi_get_minmax_bandwidth_between_processors, amdsmi_get_gpu_activity,
amdsmi_get_temp_metric(HOTSPOT, CURRENT), amdsmi_get_power_info (W),
amdsmi_get_gpu_total_ecc_count, amdsmi_shut_down.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import socket
from collections.abc import Callable, Iterator
from typing import Any

from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.telemetry import (
    Capability,
    CapabilityStatus,
    GpuReading,
    TelemetrySnapshot,
)
from gpu_platform.domain.model.topology import (
    FabricKind,
    GpuSite,
    HostTopology,
    Link,
    normalize_bus_id,
)
from gpu_platform.domain.topology.inventory import node_from_topology

__all__ = ["AmdSmiGpuDiscovery"]

_NOT_SUPPORTED = 2
_DRIVER_NOT_LOADED = 34
_MB = 1 << 20


def _num(value: Any) -> int | None:
    if value is None or isinstance(value, str):
        return None  # amdsmi reports unsupported fields as "N/A"
    return int(value)


class _Calls:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.failures: dict[str, list[tuple[CapabilityStatus, str]]] = {}
        self.features: set[str] = set()

    def __call__(self, feature: str, who: str, fn: Callable[..., Any], *args: Any) -> Any:
        self.features.add(feature)
        try:
            return fn(*args)
        except Exception as exc:
            code = exc.get_error_code() if hasattr(exc, "get_error_code") else None
            status = (
                CapabilityStatus.NOT_SUPPORTED
                if code == _NOT_SUPPORTED
                else CapabilityStatus.DEGRADED
            )
            detail = who if status is CapabilityStatus.NOT_SUPPORTED else f"{who}: {exc}"
            self.failures.setdefault(feature, []).append((status, detail))
            return None

    def capabilities(self) -> tuple[Capability, ...]:
        out = []
        for feature in sorted(self.features):
            failed = self.failures.get(feature, [])
            if not failed:
                out.append(Capability(f"{self.prefix}.{feature}", CapabilityStatus.SUPPORTED))
            for status in sorted({s for s, _ in failed}):
                who = ", ".join(d for s, d in failed if s is status)
                out.append(Capability(f"{self.prefix}.{feature}", status, who))
        return tuple(out)


class AmdSmiGpuDiscovery:
    """Implements GpuDiscovery, GpuTelemetry and TopologyProbe over amdsmi (`module` may be
    `gpu_platform.testing.fake_amdsmi.FakeAmdSmi`; None imports `amdsmi` on first use)."""

    name = "amdsmi"

    def __init__(self, module: Any | None = None, *, node: str | None = None) -> None:
        self._module = module
        self._node = node or socket.gethostname()

    def _load(self) -> tuple[Any | None, Capability]:
        smi = self._module
        if smi is None:
            captured = io.StringIO()
            try:
                with contextlib.redirect_stdout(captured):
                    smi = importlib.import_module("amdsmi")
            except Exception as exc:
                said = " ".join(captured.getvalue().split())
                detail = f"amdsmi not importable: {type(exc).__name__}: {exc}"
                return None, Capability(
                    "amdsmi", CapabilityStatus.ABSENT, f"{detail}. {said}".strip()
                )
        try:
            smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
        except Exception as exc:
            code = exc.get_error_code() if hasattr(exc, "get_error_code") else None
            status = (
                CapabilityStatus.ABSENT if code == _DRIVER_NOT_LOADED else CapabilityStatus.DEGRADED
            )
            return None, Capability("amdsmi", status, f"amdsmi_init failed: {exc}")
        return smi, Capability("amdsmi", CapabilityStatus.SUPPORTED)

    @contextlib.contextmanager
    def _session(self) -> Iterator[tuple[Any | None, Capability]]:
        smi, cap = self._load()
        try:
            yield smi, cap
        finally:
            if smi is not None:
                with contextlib.suppress(Exception):
                    smi.amdsmi_shut_down()

    def capability(self) -> Capability:
        with self._session() as (_, cap):
            return cap

    def _topology(self, smi: Any, calls: _Calls) -> tuple[HostTopology, list[Any]]:
        handles = calls("enumeration", "system", smi.amdsmi_get_processor_handles) or []
        sites = []
        for i, h in enumerate(handles):
            who = f"GPU {i}"
            bdf = calls("identity", who, smi.amdsmi_get_gpu_device_bdf, h) or f"unknown:{i}"
            uuid = calls("identity", who, smi.amdsmi_get_gpu_device_uuid, h) or ""
            asic = calls("identity", who, smi.amdsmi_get_gpu_asic_info, h) or {}
            vram = calls("memory", who, smi.amdsmi_get_gpu_vram_usage, h) or {}
            numa = calls("affinity.numa", who, smi.amdsmi_topo_get_numa_node_number, h)
            total = _num(vram.get("vram_total"))
            sites.append(
                GpuSite(
                    index=i,
                    pci_bus_id=normalize_bus_id(str(bdf)),
                    vendor=Vendor.AMD,
                    model=str(asic.get("market_name", "")),
                    uuid=str(uuid),
                    numa_node=int(numa) if isinstance(numa, int) and numa >= 0 else -1,
                    memory_bytes=(total or 0) * _MB,
                )
            )
        links = []
        xgmi = smi.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                who = f"GPU {i}-{j}"
                kind = calls(
                    "topology.link_type", who, smi.amdsmi_topo_get_link_type, handles[i], handles[j]
                )
                if not kind or kind.get("type") != xgmi or kind.get("hops") != 1:
                    continue
                bw = (
                    calls(
                        "topology.bandwidth",
                        who,
                        smi.amdsmi_get_minmax_bandwidth_between_processors,
                        handles[i],
                        handles[j],
                    )
                    or {}
                )
                links.append(
                    Link(
                        sites[i].pci_bus_id,
                        sites[j].pci_bus_id,
                        FabricKind.XGMI,
                        1,
                        _num(bw.get("max_bandwidth")) or 0,
                    )
                )
        topo = HostTopology(
            node=self._node, source=self.name, gpus=tuple(sites), links=tuple(links)
        )
        return topo, list(handles)

    def probe(self) -> HostTopology:
        with self._session() as (smi, cap):
            if smi is None:
                return HostTopology(node=self._node, source=self.name, notes=(cap.detail,))
            topo, _ = self._topology(smi, _Calls(self.name))
            return topo

    def discover(self) -> Inventory:
        with self._session() as (smi, cap):
            if smi is None:
                empty = node_from_topology(HostTopology(node=self._node, source=self.name))
                return Inventory(
                    (empty,),
                    source=self.name,
                    simulated=False,
                    notes=(f"amdsmi unavailable: {cap.detail}",),
                    capabilities=(cap,),
                )
            calls = _Calls(self.name)
            topo, _ = self._topology(smi, calls)
            node = node_from_topology(topo)
            return Inventory(
                (node,),
                source=self.name,
                simulated=False,
                notes=(f"amdsmi: {len(node.gpus)} GPU(s)",),
                capabilities=(cap, *calls.capabilities()),
            )

    def snapshot(self) -> TelemetrySnapshot:
        with self._session() as (smi, cap):
            if smi is None:
                return TelemetrySnapshot(self._node, self.name, (), (cap,))
            calls = _Calls(self.name)
            handles = calls("enumeration", "system", smi.amdsmi_get_processor_handles) or []
            readings = []
            for i, h in enumerate(handles):
                who = f"GPU {i}"
                uuid = calls("identity", who, smi.amdsmi_get_gpu_device_uuid, h) or f"unknown:{i}"
                activity = calls("utilization", who, smi.amdsmi_get_gpu_activity, h) or {}
                vram = calls("memory", who, smi.amdsmi_get_gpu_vram_usage, h) or {}
                temp = calls(
                    "temperature",
                    who,
                    smi.amdsmi_get_temp_metric,
                    h,
                    smi.AmdSmiTemperatureType.HOTSPOT,
                    smi.AmdSmiTemperatureMetric.CURRENT,
                )
                power = calls("power", who, smi.amdsmi_get_power_info, h) or {}
                ecc = calls("ecc", who, smi.amdsmi_get_gpu_total_ecc_count, h) or {}
                used, total = _num(vram.get("vram_used")), _num(vram.get("vram_total"))
                watts = _num(power.get("socket_power"))
                readings.append(
                    GpuReading(
                        uuid=str(uuid),
                        index=i,
                        utilization_pct=_num(activity.get("gfx_activity")),
                        memory_used_bytes=used * _MB if used is not None else None,
                        memory_total_bytes=total * _MB if total is not None else None,
                        temperature_c=_num(temp),
                        power_mw=watts * 1000 if watts is not None else None,
                        ecc_corrected=_num(ecc.get("correctable_count")),
                        ecc_uncorrected=_num(ecc.get("uncorrectable_count")),
                    )
                )
            return TelemetrySnapshot(
                self._node, self.name, tuple(readings), (cap, *calls.capabilities())
            )
