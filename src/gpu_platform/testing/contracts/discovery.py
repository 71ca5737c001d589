"""Contracts of GpuDiscovery and GpuTelemetry (ports/outbound/gpu_discovery.py)."""

from __future__ import annotations

from typing import Any

from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.telemetry import CapabilityStatus, TelemetrySnapshot
from gpu_platform.ports.outbound.gpu_discovery import GpuDiscovery, GpuTelemetry

__all__ = ["GpuDiscoveryContract", "GpuTelemetryContract"]


class GpuDiscoveryContract:
    """What every GpuDiscovery promises."""

    def make(self) -> GpuDiscovery:
        raise NotImplementedError

    def test_it_is_a_gpu_discovery_with_a_name(self) -> None:
        adapter = self.make()
        assert isinstance(adapter, GpuDiscovery)
        assert adapter.name

    def test_discover_returns_an_inventory_of_at_least_one_node(self) -> None:
        inv = self.make().discover()
        assert isinstance(inv, Inventory)
        assert inv.nodes
        assert inv.source

    def test_discovering_twice_gives_equal_inventories(self) -> None:
        adapter = self.make()
        assert adapter.discover() == adapter.discover()

    def test_gpus_have_unique_ids_and_indices_on_their_node(self) -> None:
        for node in self.make().discover().nodes:
            assert len({g.index for g in node.gpus}) == len(node.gpus)
            assert all(g.uuid and g.node == node.name for g in node.gpus)
            assert all(g.memory_bytes >= 0 for g in node.gpus)

    def test_a_simulated_inventory_says_so_in_its_notes(self) -> None:
        inv = self.make().discover()
        if inv.simulated:
            assert any("SIMULATED" in n or "simulated" in n for n in inv.notes)

    def test_capabilities_that_are_not_supported_say_why(self) -> None:
        for cap in self.make().discover().capabilities:
            if cap.status is not CapabilityStatus.SUPPORTED:
                assert cap.detail

    def test_a_node_with_a_topology_agrees_with_its_gpus(self) -> None:
        for node in self.make().discover().nodes:
            if node.topology is None:
                continue
            assert {g.index for g in node.topology.gpus} == {g.index for g in node.gpus}
            assert node.topology.node == node.name


class GpuTelemetryContract:
    """What every GpuTelemetry promises. `make()` returns an adapter that is also a
    GpuDiscovery, so readings can be checked against the inventory."""

    def make(self) -> Any:
        raise NotImplementedError

    def test_it_is_a_gpu_telemetry(self) -> None:
        assert isinstance(self.make(), GpuTelemetry)

    def test_snapshot_has_one_reading_per_discovered_gpu_in_index_order(self) -> None:
        adapter = self.make()
        snap = adapter.snapshot()
        assert isinstance(snap, TelemetrySnapshot)
        gpus = [g for n in adapter.discover().nodes for g in n.gpus]
        assert [r.uuid for r in snap.gpus] == [g.uuid for g in sorted(gpus, key=lambda g: g.index)]

    def test_readings_are_unknown_or_plausible(self) -> None:
        for r in self.make().snapshot().gpus:
            assert r.utilization_pct is None or 0 <= r.utilization_pct <= 100
            assert r.temperature_c is None or -40 <= r.temperature_c <= 150
            assert r.power_mw is None or r.power_mw >= 0
            if r.memory_used_bytes is not None and r.memory_total_bytes is not None:
                assert 0 <= r.memory_used_bytes <= r.memory_total_bytes

    def test_an_unknown_reading_is_explained_by_a_capability(self) -> None:
        snap = self.make().snapshot()
        missing = [r for r in snap.gpus if r.utilization_pct is None or r.temperature_c is None]
        if missing:
            assert any(not c.ok for c in snap.capabilities)
