"""NVML on a real NVIDIA GPU: the inventory and telemetry the adapters read against what
nvidia-smi says, the health monitor's XID/ECC event registration and its polling, and MIG mode
read (never set)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from gpu_platform.adapters.outbound.nvml import NvmlGpuDiscovery
from gpu_platform.adapters.outbound.nvml.health import NvmlHealthMonitor
from gpu_platform.adapters.outbound.nvml.mig import NvmlMigController
from gpu_platform.domain.faults.health import (
    EccReading,
    GpuLostReport,
    Heartbeat,
    ThermalReading,
    XidReport,
)
from tests.gpu.conftest import smi_rows

MIB = 1 << 20
XID_CRITICAL, DOUBLE_BIT_ECC, SINGLE_BIT_ECC = 0x8, 0x2, 0x1


def test_discovery_finds_each_gpu_nvidia_smi_lists_with_its_uuid_memory_and_bus(
    nvidia: Any, seen: dict[str, Any]
) -> None:
    inventory = NvmlGpuDiscovery().discover()
    assert inventory.source == "nvml" and not inventory.simulated, inventory.notes
    (node,) = inventory.nodes
    gpus = sorted(node.gpus, key=lambda g: g.index)
    rows = smi_rows("index", "uuid", "name", "memory.total", "pci.bus_id", "driver_version")
    seen["nvidia_smi"] = rows
    seen["discovery"] = {
        "notes": inventory.notes,
        "gpus": [dataclasses.asdict(g) for g in gpus],
        "capabilities": [
            f"{c.name}: {c.status.value} {c.detail}".strip() for c in inventory.capabilities
        ],
        "numa_nodes": len(node.numa_nodes),
        "cpus": node.cpus,
    }
    assert [g.uuid for g in gpus] == [r[1] for r in rows]
    for gpu, row in zip(gpus, rows, strict=True):
        assert gpu.model, gpu
        assert abs(gpu.memory_bytes - int(row[3]) * MIB) < MIB, (gpu.memory_bytes, row)
        assert row[4].lower().endswith(gpu.pci_bus_id.lower().split(":", 1)[-1]), (gpu, row)


def test_telemetry_reads_memory_temperature_power_and_ecc_of_the_gpu(
    nvidia: Any, seen: dict[str, Any]
) -> None:
    snapshot = NvmlGpuDiscovery().snapshot()
    rows = smi_rows(
        "memory.used", "memory.total", "temperature.gpu", "power.draw", "ecc.mode.current"
    )
    seen["telemetry"] = {
        "readings": [dataclasses.asdict(r) for r in snapshot.gpus],
        "not_supported": [
            f"{c.name}: {c.status.value} {c.detail}".strip()
            for c in snapshot.capabilities
            if not c.ok
        ],
        "nvidia_smi": rows,
    }
    assert len(snapshot.gpus) == len(rows)
    for reading, row in zip(snapshot.gpus, rows, strict=True):
        assert reading.memory_total_bytes is not None
        assert abs(reading.memory_total_bytes - int(row[1]) * MIB) < MIB
        assert reading.memory_used_bytes is not None
        assert abs(reading.memory_used_bytes - int(row[0]) * MIB) < 64 * MIB
        assert reading.temperature_c is not None and 5 <= reading.temperature_c <= 100
        assert reading.power_mw is not None and reading.power_mw > 0


def test_the_health_monitor_registers_for_xid_and_ecc_events_and_polls_without_faults(
    nvidia: Any, seen: dict[str, Any]
) -> None:
    handle = nvidia.nvmlDeviceGetHandleByIndex(0)
    supported = nvidia.nvmlDeviceGetSupportedEventTypes(handle)
    try:
        ecc_mode = nvidia.nvmlDeviceGetEccMode(handle)
    except nvidia.NVMLError as exc:
        ecc_mode = str(exc)
    events: list[object] = []
    monitor = NvmlHealthMonitor(node="gpu-check", poll_interval_s=0.2, wait_ms=200)
    monitor.start(events.append)
    try:
        deadline = time.monotonic() + 30
        while sum(isinstance(e, Heartbeat) for e in events) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        monitor.poll_once()
    finally:
        monitor.stop()
    kinds = sorted({type(e).__name__ for e in events})
    seen["health"] = {
        "supported_event_types": hex(supported),
        "xid_events": bool(supported & XID_CRITICAL),
        "ecc_events": [bool(supported & DOUBLE_BIT_ECC), bool(supported & SINGLE_BIT_ECC)],
        "ecc_mode_current_pending": ecc_mode,
        "event_kinds": kinds,
        "first_ecc": next((repr(e) for e in events if isinstance(e, EccReading)), None),
        "first_thermal": next((repr(e) for e in events if isinstance(e, ThermalReading)), None),
    }
    assert supported & XID_CRITICAL, f"XID events not offered: {hex(supported)}"
    assert "Heartbeat" in kinds and "ThermalReading" in kinds, kinds
    assert not [e for e in events if isinstance(e, XidReport | GpuLostReport)], events
    for e in events:
        if isinstance(e, EccReading):  # a healthy GPU: no uncorrected errors, no row failure
            assert e.uncorrected == 0 and not e.remap_failed, e


def test_mig_mode_is_read_as_nvidia_smi_shows_it_and_left_unchanged(
    nvidia: Any, seen: dict[str, Any]
) -> None:
    (before,) = smi_rows("mig.mode.current")[:1]
    controller = NvmlMigController()
    try:
        enabled = controller.mig_enabled(0)
        placements = controller.possible_placements(0, 9) if enabled else []
    finally:
        controller.close()
    (after,) = smi_rows("mig.mode.current")[:1]
    seen["mig"] = {"nvidia_smi": before[0], "ours": enabled, "3g_placements": placements}
    assert after == before
    assert enabled == (before[0] == "Enabled"), (enabled, before)
