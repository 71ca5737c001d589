"""The GpuTelemetry contract."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_platform.domain.model.telemetry import TelemetrySnapshot
from gpu_platform.ports.outbound.gpu_discovery import GpuTelemetry

__all__ = ["GpuTelemetryContract"]


class GpuTelemetryContract:
    """Subclass and provide `telemetry`: an adapter that is both GpuTelemetry and
    GpuDiscovery, so readings can be checked against the inventory."""

    @pytest.fixture
    def telemetry(self) -> Any:
        raise NotImplementedError

    def test_it_is_a_gpu_telemetry(self, telemetry: Any) -> None:
        assert isinstance(telemetry, GpuTelemetry)

    def test_snapshot_has_one_reading_per_discovered_gpu_in_index_order(
        self, telemetry: Any
    ) -> None:
        snap = telemetry.snapshot()
        assert isinstance(snap, TelemetrySnapshot)
        gpus = sorted(
            (g for n in telemetry.discover().nodes for g in n.gpus), key=lambda g: g.index
        )
        assert [r.uuid for r in snap.gpus] == [g.uuid for g in gpus]

    def test_readings_are_unknown_or_plausible(self, telemetry: Any) -> None:
        for r in telemetry.snapshot().gpus:
            assert r.utilization_pct is None or 0 <= r.utilization_pct <= 100
            assert r.temperature_c is None or -40 <= r.temperature_c <= 150
            assert r.power_mw is None or r.power_mw >= 0
            if r.memory_used_bytes is not None and r.memory_total_bytes is not None:
                assert 0 <= r.memory_used_bytes <= r.memory_total_bytes

    def test_an_unknown_reading_is_explained_by_a_capability(self, telemetry: Any) -> None:
        snap = telemetry.snapshot()
        missing = [r for r in snap.gpus if r.utilization_pct is None or r.temperature_c is None]
        if missing:
            assert any(not c.ok for c in snap.capabilities)
