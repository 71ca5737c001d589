"""TelemetryHealthMonitor: amdsmi (and any GpuTelemetry) polled into health findings; and the
composition root's choice of health source."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.amdsmi import AmdSmiGpuDiscovery
from gpu_platform.adapters.outbound.nvml import NvmlHealthMonitor
from gpu_platform.adapters.outbound.sim import SimulatedHardware
from gpu_platform.adapters.outbound.sim.profiles import profile_topology
from gpu_platform.adapters.outbound.telemetry_health import TelemetryHealthMonitor
from gpu_platform.domain.faults.health import EccReading, HealthEvent, Heartbeat, ThermalReading
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.telemetry import GpuReading, TelemetrySnapshot
from gpu_platform.infrastructure.config import ConfigError, Settings
from gpu_platform.infrastructure.container import fault_policy, select_health
from gpu_platform.testing.fake_amdsmi import FakeAmdSmi
from gpu_platform.testing.fakes import InMemoryGpuDiscovery


def test_amdsmi_temperature_and_ecc_become_findings_then_a_heartbeat() -> None:
    smi = FakeAmdSmi(profile_topology("mixed-vendor", "mixed"))
    smi.temperature[0] = 97
    smi.ecc[1] = (5, 2)
    events: list[HealthEvent] = []
    mon = TelemetryHealthMonitor(AmdSmiGpuDiscovery(smi, node="mixed"))
    mon.start(events.append)
    mon.stop()
    assert ThermalReading("mixed", 0, 97.0, 0) in events
    assert EccReading("mixed", 1, 5, 2, False, False) in events
    assert events[-1] == Heartbeat("mixed")


class Telemetry:
    name = "t"

    def __init__(self, readings: tuple[GpuReading, ...]) -> None:
        self.readings = readings

    def discover(self) -> Inventory:  # pragma: no cover - not used
        raise NotImplementedError

    def snapshot(self) -> TelemetrySnapshot:
        return TelemetrySnapshot("n9", "t", self.readings)


def test_thermal_clock_reasons_are_passed_on_and_unsupported_readings_left_out() -> None:
    readings = (
        GpuReading("u0", 0, temperature_c=70, clock_event_reasons=("hw_thermal_slowdown",)),
        GpuReading("u1", 1),
    )
    events: list[HealthEvent] = []
    mon = TelemetryHealthMonitor(Telemetry(readings))
    mon._sink = events.append
    mon.poll_once()
    assert events == [ThermalReading("n9", 0, 70.0, 0x40), Heartbeat("n9")]


def test_auto_picks_the_simulator_for_a_simulated_inventory(
    tmp_path: Path, inventory: Inventory
) -> None:
    parts = select_health(Settings(data_dir=tmp_path), inventory, InMemoryGpuDiscovery(inventory))
    assert [type(m) for m in parts.monitors] == [SimulatedHardware]
    assert parts.reset is parts.injector is parts.monitors[0] and parts.heartbeats


def test_auto_picks_nvml_for_an_nvml_inventory_and_keeps_the_injector_quiet(
    tmp_path: Path, inventory: Inventory
) -> None:
    nvml_inv = Inventory(inventory.nodes, source="nvml+hwloc", simulated=False)
    parts = select_health(Settings(data_dir=tmp_path), nvml_inv, InMemoryGpuDiscovery(nvml_inv))
    assert [type(m) for m in parts.monitors] == [NvmlHealthMonitor, SimulatedHardware]
    assert type(parts.reset).__name__ == "NvidiaSmiGpuReset"


def test_auto_polls_telemetry_for_other_real_gpus_and_none_turns_heartbeats_off(
    tmp_path: Path,
) -> None:
    smi = AmdSmiGpuDiscovery(FakeAmdSmi(profile_topology("mixed-vendor", "mixed")), node="m")
    inv = Inventory(smi.discover().nodes, source="amdsmi", simulated=False)
    parts = select_health(Settings(data_dir=tmp_path), inv, smi)
    assert [type(m) for m in parts.monitors] == [TelemetryHealthMonitor, SimulatedHardware]
    assert parts.reset is None  # no AMD reset adapter yet: a GPU needing one goes OFFLINE
    none = select_health(
        Settings(data_dir=tmp_path, health_source="none", fault_injection=False), inv, smi
    )
    assert (none.monitors, none.injector, none.heartbeats) == ((), None, False)


def test_telemetry_needs_an_adapter_that_has_it(tmp_path: Path, inventory: Inventory) -> None:
    class Bare:
        name = "bare"

        def discover(self) -> Inventory:
            return inventory

    with pytest.raises(ConfigError, match="bare has no telemetry"):
        select_health(Settings(data_dir=tmp_path, health_source="telemetry"), inventory, Bare())  # type: ignore[arg-type]


def test_fault_settings_become_the_policy_and_bad_ones_are_config_errors(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, xid_overrides={109: "job"}, thermal_hot_celsius=85)
    policy = fault_policy(settings)
    assert policy.xid_overrides == ((109, "job"),) and policy.thermal_hot_c == 85
    with pytest.raises(ConfigError, match="hysteresis"):
        fault_policy(Settings(data_dir=tmp_path, thermal_hot_celsius=70))
