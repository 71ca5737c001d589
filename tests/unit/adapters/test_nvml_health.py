"""NvmlHealthMonitor over the fake pynvml: events on their own thread, polled fields, lost GPUs,
heartbeats; and the nvidia-smi reset adapter over stand-in executables."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_platform.adapters.outbound.nvml import NvidiaSmiGpuReset, NvmlHealthMonitor
from gpu_platform.adapters.outbound.sim.profiles import profile_topology
from gpu_platform.domain.faults.health import (
    EccReading,
    GpuLostReport,
    HealthEvent,
    Heartbeat,
    ThermalReading,
    XidReport,
)
from gpu_platform.ports.outbound.gpu_reset import GpuResetError
from gpu_platform.testing.fake_pynvml import FakePynvml


class Sink:
    def __init__(self) -> None:
        self.events: list[HealthEvent] = []
        self.cond = threading.Condition()

    def __call__(self, event: HealthEvent) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def wait_for(self, event: HealthEvent, timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: event in self.events, timeout), self.events


@pytest.fixture
def nvml() -> FakePynvml:
    return FakePynvml(profile_topology("dgx-a100"))


def monitor(nvml: FakePynvml) -> NvmlHealthMonitor:
    # A long poll interval: polling happens once at start, the rest comes from events.
    return NvmlHealthMonitor(nvml, node="n1", poll_interval_s=3600, wait_ms=50)


def test_an_xid_event_is_reported_from_the_event_thread(nvml: FakePynvml) -> None:
    sink = Sink()
    mon = monitor(nvml)
    mon.start(sink)
    try:
        sink.wait_for(Heartbeat("n1"))
        assert nvml.fire_event(3, nvml.nvmlEventTypeXidCriticalError, 79) == 1
        sink.wait_for(XidReport("n1", 3, 79))
    finally:
        mon.stop()
    assert nvml.event_sets[0].freed and nvml.initialised == 0


def test_an_ecc_event_triggers_an_immediate_ecc_reading_of_that_gpu(nvml: FakePynvml) -> None:
    sink = Sink()
    mon = monitor(nvml)
    mon.start(sink)
    try:
        sink.wait_for(Heartbeat("n1"))
        nvml.state[2].ecc_uncorrected = 4
        nvml.state[2].remapped = (0, 1, 1, 0)
        nvml.fire_event(2, nvml.nvmlEventTypeDoubleBitEccError)
        sink.wait_for(EccReading("n1", 2, 0, 4, True, False))
    finally:
        mon.stop()


def test_a_poll_reports_ecc_temperature_clock_reasons_and_a_heartbeat(nvml: FakePynvml) -> None:
    sink = Sink()
    mon = NvmlHealthMonitor(nvml, node="n1", poll_interval_s=3600, wait_ms=50)
    nvml.state[5].temperature = 93
    nvml.state[5].clock_reasons = 0x40
    nvml.state[6].ecc_corrected = 12
    mon.start(sink)
    try:
        sink.wait_for(Heartbeat("n1"))
    finally:
        mon.stop()
    assert ThermalReading("n1", 5, 93.0, 0x40) in sink.events
    assert EccReading("n1", 6, 12, 0, False, False) in sink.events


def test_a_lost_gpu_is_reported_once_and_not_polled_again(nvml: FakePynvml) -> None:
    sink = Sink()
    mon = monitor(nvml)
    mon.start(sink)
    try:
        sink.wait_for(Heartbeat("n1"))
        nvml.lost.add(4)
        mon.poll_once()
        mon.poll_once()
    finally:
        mon.stop()
    lost = [e for e in sink.events if isinstance(e, GpuLostReport)]
    assert [e.gpu_index for e in lost] == [4]
    assert "GPU is lost" in lost[0].detail


def test_readings_a_gpu_does_not_support_are_left_out_not_reported_as_zero() -> None:
    nvml = FakePynvml(
        profile_topology("dgx-a100"),
        not_supported={"nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows"},
    )
    sink = Sink()
    mon = monitor(nvml)
    mon.start(sink)
    try:
        sink.wait_for(Heartbeat("n1"))
    finally:
        mon.stop()
    assert not any(isinstance(e, EccReading) for e in sink.events)
    assert any(isinstance(e, ThermalReading) for e in sink.events)


def test_a_gpu_that_refuses_event_registration_is_still_polled() -> None:
    nvml = FakePynvml(profile_topology("dgx-a100"), not_supported={("nvmlDeviceRegisterEvents", 0)})
    sink = Sink()
    mon = monitor(nvml)
    mon.start(sink)
    try:
        sink.wait_for(Heartbeat("n1"))
        assert nvml.fire_event(0, nvml.nvmlEventTypeXidCriticalError, 48) == 0
        assert nvml.fire_event(1, nvml.nvmlEventTypeXidCriticalError, 48) == 1
        sink.wait_for(XidReport("n1", 1, 48))
    finally:
        mon.stop()
    assert ThermalReading("n1", 0, 30.0, 0x1) in sink.events


def _tool(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


def test_nvidia_smi_reset_passes_on_exit_0_and_names_the_gpu(tmp_path: Path) -> None:
    args = tmp_path / "args"
    reset = NvidiaSmiGpuReset("n1", binary=_tool(tmp_path, f'echo "$@" > {args}'))
    reset.reset("n1", 3)
    assert args.read_text().split() == ["--gpu-reset", "-i", "3"]


def test_nvidia_smi_reset_fails_with_the_tools_last_line(tmp_path: Path) -> None:
    body = 'echo "GPU 00000000:07:00.0 is currently in use by another process." >&2; exit 255'
    reset = NvidiaSmiGpuReset("n1", binary=_tool(tmp_path, body))
    with pytest.raises(GpuResetError, match=r"exited 255: GPU .* in use"):
        reset.reset("n1", 0)


def test_nvidia_smi_reset_refuses_other_nodes_and_a_missing_tool(tmp_path: Path) -> None:
    with pytest.raises(GpuResetError, match="not on this node"):
        NvidiaSmiGpuReset("n1", binary="true").reset("n2", 0)
    with pytest.raises(GpuResetError, match="not found"):
        NvidiaSmiGpuReset("n1", binary=str(tmp_path / "absent")).reset("n1", 0)


def test_stop_ends_both_threads_and_releases_nvml(nvml: FakePynvml) -> None:
    mon = NvmlHealthMonitor(nvml, node="n1", poll_interval_s=3600, wait_ms=200)
    mon.start(Sink())
    mon.stop()
    assert all(not t.is_alive() for t in threading.enumerate() if t.name.startswith("nvml-"))
    assert nvml.initialised == 0


def test_an_event_whose_device_is_a_fresh_handle_object_is_matched_by_its_nvml_index(
    nvml: FakePynvml,
) -> None:
    # Real pynvml returns a new ctypes pointer in each event: it never == our handles.
    fresh = object()
    by_index = nvml.nvmlDeviceGetIndex
    nvml.nvmlDeviceGetIndex = lambda h: 5 if h is fresh else by_index(h)  # type: ignore[method-assign]
    sink = Sink()
    mon = monitor(nvml)
    mon.start(sink)
    try:
        sink.wait_for(Heartbeat("n1"))
        event = SimpleNamespace(device=fresh, eventType=nvml.nvmlEventTypeXidCriticalError)
        event.eventData = 94
        nvml.event_sets[0].events.put(event)
        sink.wait_for(XidReport("n1", 5, 94))
    finally:
        mon.stop()
