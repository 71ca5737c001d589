"""NvmlHealthMonitor: XID and ECC events on a dedicated thread, plus periodic field polling.

Two threads (research/hardware.md §1.3):

- events: one NVML event set with XidCriticalError | DoubleBitEccError | SingleBitEccError
  (masked by each GPU's supported types; a GPU that refuses registration is polled only),
  `nvmlEventSetWait` with `wait_ms`; an XID becomes an `XidReport`, an ECC event an immediate
  ECC poll of that GPU. A wait error other than Timeout is logged and the wait retried after
  a second (the poll thread still watches every GPU).
- poll: every `poll_interval_s`, per GPU: volatile ECC totals and remapped rows
  (`EccReading`), temperature and clock-event reasons (`ThermalReading`); a GPU answering
  GpuIsLost is reported once (`GpuLostReport`); then a `Heartbeat` for this node.

Readings a GPU does not support (NotSupported) are left out, never reported as zero faults.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import structlog

from gpu_platform.domain.faults.health import (
    EccReading,
    GpuLostReport,
    HealthEvent,
    Heartbeat,
    ThermalReading,
    XidReport,
)
from gpu_platform.ports.outbound.health_monitor import HealthSink

__all__ = ["NvmlHealthMonitor"]

log = structlog.get_logger(__name__)

_SBE, _DBE, _XID = 0x1, 0x2, 0x8
_TIMEOUT, _GPU_LOST = 10, 15


class NvmlHealthMonitor:
    """Implements HealthMonitor for the NVIDIA GPUs of this node (`node` names it)."""

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        node: str,
        poll_interval_s: float = 5.0,
        wait_ms: int = 5000,
    ) -> None:
        self._nvml = nvml
        self._node = node
        self._interval = poll_interval_s
        self._wait_ms = wait_ms
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sink: HealthSink | None = None
        self._handles: list[Any] = []
        self._lost: set[int] = set()
        self._emit_lock = threading.Lock()
        self._event_set: Any = None

    def start(self, sink: HealthSink) -> None:
        nvml = self._nvml or importlib.import_module("pynvml")
        self._nvml = nvml
        nvml.nvmlInit()
        self._sink = sink
        count = nvml.nvmlDeviceGetCount()
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._event_set = self._register(nvml)
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._poll_loop, name="nvml-poll", daemon=True),
        ]
        if self._event_set is not None:
            self._threads.append(
                threading.Thread(target=self._event_loop, name="nvml-events", daemon=True)
            )
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self._wait_ms / 1000 + 5)
        self._threads = []
        nvml = self._nvml
        if nvml is not None and self._sink is not None:
            try:
                if self._event_set is not None:
                    nvml.nvmlEventSetFree(self._event_set)
                nvml.nvmlShutdown()
            except Exception as exc:  # shutting down: report, do not raise
                log.warning("nvml shutdown failed", error=str(exc))
            self._sink = None

    # -- events ----------------------------------------------------------------------------------

    def _register(self, nvml: Any) -> Any:
        try:
            es = nvml.nvmlEventSetCreate()
        except Exception as exc:
            log.warning("nvml event set unavailable; polling only", error=str(exc))
            return None
        for i, h in enumerate(self._handles):
            try:
                mask = (_XID | _DBE | _SBE) & nvml.nvmlDeviceGetSupportedEventTypes(h)
                nvml.nvmlDeviceRegisterEvents(h, mask, es)
            except Exception as exc:  # NotSupported: "event set can still be used"
                log.info("nvml events not supported on gpu; polled only", gpu=i, error=str(exc))
        return es

    def _event_loop(self) -> None:
        nvml: Any = self._nvml
        while not self._stop.is_set():
            try:
                ev = nvml.nvmlEventSetWait(self._event_set, self._wait_ms)
            except Exception as exc:
                if getattr(exc, "value", None) != _TIMEOUT:
                    log.warning("nvml event wait failed", error=str(exc))
                    self._stop.wait(1.0)
                continue
            index = self._index_of(ev.device)
            if index is None:
                continue
            if ev.eventType & _XID:
                self._emit(XidReport(self._node, index, int(ev.eventData)))
            if ev.eventType & (_DBE | _SBE):
                self._poll_gpu(index, ecc_only=True)

    def _index_of(self, handle: Any) -> int | None:
        """The NVML index of an event's device. pynvml hands back a fresh ctypes pointer, which
        never compares equal to ours, so ask NVML; fall back to identity for other bindings."""
        try:
            nvml: Any = self._nvml
            index = int(nvml.nvmlDeviceGetIndex(handle))
        except Exception:
            index = -1
        if 0 <= index < len(self._handles):
            return index
        for i, h in enumerate(self._handles):
            if h is handle or h == handle:
                return i
        log.warning("nvml event for an unknown device", device=repr(handle))
        return None

    # -- polling ---------------------------------------------------------------------------------

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            for i in range(len(self._handles)):
                self._poll_gpu(i)
            self._emit(Heartbeat(self._node))
            self._stop.wait(self._interval)

    def poll_once(self) -> None:
        """One polling pass over every GPU, then a heartbeat (what the poll thread repeats)."""
        for i in range(len(self._handles)):
            self._poll_gpu(i)
        self._emit(Heartbeat(self._node))

    def _poll_gpu(self, i: int, *, ecc_only: bool = False) -> None:
        if i in self._lost:
            return
        nvml: Any = self._nvml
        h = self._handles[i]
        try:
            corrected = self._optional(nvml.nvmlDeviceGetTotalEccErrors, h, 0, 0)
            uncorrected = self._optional(nvml.nvmlDeviceGetTotalEccErrors, h, 1, 0)
            remap = self._optional(nvml.nvmlDeviceGetRemappedRows, h)
            if corrected is not None or uncorrected is not None or remap is not None:
                pending, failed = (bool(remap[2]), bool(remap[3])) if remap else (False, False)
                self._emit(
                    EccReading(self._node, i, corrected or 0, uncorrected or 0, pending, failed)
                )
            if ecc_only:
                return
            temp = self._optional(getattr(nvml, "nvmlDeviceGetTemperatureV", None), h, 0)
            if temp is None:  # older drivers lack the V call (FunctionNotFound)
                temp = self._optional(getattr(nvml, "nvmlDeviceGetTemperature", None), h, 0)
            reasons = self._optional(nvml.nvmlDeviceGetCurrentClocksEventReasons, h)
            if temp is not None:
                self._emit(ThermalReading(self._node, i, float(temp), int(reasons or 0)))
        except _Lost as lost:
            self._lost.add(i)
            self._emit(GpuLostReport(self._node, i, f"NVML: {lost}"))

    def _optional(self, fn: Any, *args: Any) -> Any:
        """Call fn; None when the GPU (or binding) does not support it; raise _Lost when the
        GPU is lost."""
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            if getattr(exc, "value", None) == _GPU_LOST:
                raise _Lost(str(exc)) from None
            return None

    def _emit(self, event: HealthEvent) -> None:
        sink = self._sink
        if sink is None:
            return
        with self._emit_lock:  # one finding at a time, in observation order
            try:
                sink(event)
            except Exception:
                log.exception("health sink failed", finding=repr(event))


class _Lost(Exception):
    """The GPU answered NVML_ERROR_GPU_IS_LOST."""
