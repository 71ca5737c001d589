"""TelemetryHealthMonitor: health by polling any GpuTelemetry adapter (amdsmi, Level Zero).

AMD and Intel have no XID stream (research/hardware.md §2): every `interval_s` this monitor
takes one `snapshot()` and reports, per GPU, its ECC totals (`EccReading`, when the adapter
could read them) and its temperature (`ThermalReading`, with NVML-style thermal clock bits when
the adapter names them), then a `Heartbeat` for the snapshot's node. A snapshot that fails is
logged and retried next period; readings the hardware does not support are left out.
"""

from __future__ import annotations

import threading

import structlog

from gpu_platform.domain.faults.health import EccReading, HealthEvent, Heartbeat, ThermalReading
from gpu_platform.ports.outbound.gpu_discovery import GpuTelemetry
from gpu_platform.ports.outbound.health_monitor import HealthSink

__all__ = ["TelemetryHealthMonitor"]

log = structlog.get_logger(__name__)

_REASON_BITS = {"sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40}


class TelemetryHealthMonitor:
    """Implements HealthMonitor over a GpuTelemetry adapter's snapshots."""

    def __init__(self, telemetry: GpuTelemetry, *, interval_s: float = 5.0) -> None:
        self._telemetry = telemetry
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sink: HealthSink | None = None

    def start(self, sink: HealthSink) -> None:
        self._sink = sink
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="telemetry-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._interval)

    def poll_once(self) -> None:
        """One snapshot turned into findings, then the heartbeat."""
        try:
            snap = self._telemetry.snapshot()
        except Exception:
            log.exception("telemetry snapshot failed")
            return
        for r in snap.gpus:
            if r.ecc_corrected is not None or r.ecc_uncorrected is not None:
                rows = r.remapped_rows
                self._emit(
                    EccReading(
                        snap.node,
                        r.index,
                        r.ecc_corrected or 0,
                        r.ecc_uncorrected or 0,
                        rows.pending if rows else False,
                        rows.failed if rows else False,
                    )
                )
            if r.temperature_c is not None:
                bits = sum(_REASON_BITS.get(n, 0) for n in r.clock_event_reasons or ())
                self._emit(ThermalReading(snap.node, r.index, float(r.temperature_c), bits))
        self._emit(Heartbeat(snap.node))

    def _emit(self, event: HealthEvent) -> None:
        sink = self._sink
        if sink is None:
            return
        try:
            sink(event)
        except Exception:
            log.exception("health sink failed", finding=repr(event))
