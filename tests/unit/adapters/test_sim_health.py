"""SimulatedHardware: the fault-script grammar, delivery (now or later), heartbeats, resets."""

from __future__ import annotations

import threading

import pytest

from gpu_platform.adapters.inbound.cli.admin import parse_gpu_ref
from gpu_platform.adapters.outbound.sim import SimulatedHardware, parse_script
from gpu_platform.domain.faults.health import (
    EccReading,
    GpuLostReport,
    HealthEvent,
    Heartbeat,
    ThermalReading,
    XidReport,
)
from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.gpu_reset import GpuResetError

N = "node-0"


class Sink:
    def __init__(self) -> None:
        self.events: list[HealthEvent] = []
        self.cond = threading.Condition()

    def __call__(self, event: HealthEvent) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def wait_for(self, event: HealthEvent) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: event in self.events, 10), self.events


def test_the_grammar_normalises_lines_and_defaults_to_the_first_node(inventory: Inventory) -> None:
    script = (
        "XID 79 on GPU 3; ecc uncorrected 2 on gpu 1 node node-0 at 5\n# comment\ntemp 95 on gpu 0"
    )
    assert [str(line) for line in parse_script(script, inventory)] == [
        f"xid 79 on gpu 3 node {N}",
        f"ecc uncorrected 2 on gpu 1 node {N} at 5",
        f"temp 95 on gpu 0 node {N}",
    ]
    assert [
        str(x) for x in parse_script("lost gpu 2; heartbeat stop; reset-fail on gpu 4", inventory)
    ] == [
        f"lost on gpu 2 node {N}",
        f"heartbeat stop node {N}",
        f"reset-fail on gpu 4 node {N}",
    ]


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("xid 79 on gpu 8", "has no GPU 8"),
        ("xid 79 on gpu 1 node elsewhere", "no node 'elsewhere'"),
        ("xid on gpu 1", "cannot parse"),
        ("format the disks", "cannot parse"),
        ("  ;  ", "empty script"),
        ("remap sideways on gpu 1", "cannot parse"),
    ],
)
def test_a_bad_line_is_refused_naming_it(inventory: Inventory, script: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_script(script, inventory)


def test_immediate_lines_are_delivered_before_inject_returns(inventory: Inventory) -> None:
    sim, sink = SimulatedHardware(inventory, heartbeats=False), Sink()
    sim.start(sink)
    try:
        sim.inject("xid 48 on gpu 2; ecc uncorrected 2 on gpu 1; ecc uncorrected 1 on gpu 1")
        sim.inject("remap pending on gpu 1; temp 91.5 on gpu 0; lost gpu 5")
        assert sink.events == [
            XidReport(N, 2, 48),
            EccReading(N, 1, 0, 2, False, False),
            EccReading(N, 1, 0, 3, False, False),
            EccReading(N, 1, 0, 3, True, False),
            ThermalReading(N, 0, 91.5),
            GpuLostReport(N, 5, "GPU has fallen off the bus (simulated)"),
        ]
    finally:
        sim.stop()


def test_a_delayed_line_is_delivered_later_by_the_monitor_thread(inventory: Inventory) -> None:
    sim, sink = SimulatedHardware(inventory, heartbeats=False), Sink()
    sim.start(sink)
    try:
        sim.inject("xid 31 on gpu 4 at 0.05")
        assert XidReport(N, 4, 31) not in sink.events
        sink.wait_for(XidReport(N, 4, 31))
    finally:
        sim.stop()


def test_heartbeats_flow_and_resume_after_a_scripted_stop(
    inventory: Inventory,
) -> None:
    sim, sink = SimulatedHardware(inventory, heartbeat_interval_s=0.01), Sink()
    sim.start(sink)
    try:
        sink.wait_for(Heartbeat(N))
        sim.inject("heartbeat stop")
        with sink.cond:
            sink.events.clear()
        sim.inject("heartbeat start")
        sink.wait_for(Heartbeat(N))
    finally:
        sim.stop()


def test_a_reset_clears_volatile_ecc_and_pending_remaps_but_cannot_fix_a_lost_gpu(
    inventory: Inventory,
) -> None:
    sim, sink = SimulatedHardware(inventory, heartbeats=False), Sink()
    sim.start(sink)
    try:
        sim.inject("ecc uncorrected 2 on gpu 1; remap pending on gpu 1")
        sim.reset(N, 1)
        sim.inject("ecc corrected 1 on gpu 1")
        assert sink.events[-1] == EccReading(N, 1, 1, 0, False, False)
        sim.inject("lost gpu 2; remap failed on gpu 3; reset-fail on gpu 4")
        for gpu, why in ((2, "power cycle"), (3, "replacing"), (4, "simulated reset failure")):
            with pytest.raises(GpuResetError, match=why):
                sim.reset(N, gpu)
        sim.reset(N, 4)  # only the next reset fails
    finally:
        sim.stop()


def test_injecting_into_hardware_nobody_listens_to_is_refused(inventory: Inventory) -> None:
    with pytest.raises(ValueError, match="not started"):
        SimulatedHardware(inventory).inject("xid 79 on gpu 0")


def test_a_gpu_reference_is_node_colon_index() -> None:
    assert parse_gpu_ref("node-0:3") == ("node-0", 3)
    assert parse_gpu_ref("rack1:node:7") == ("rack1:node", 7)
    for bad in ("node-0", ":3", "node-0:x", "node-0:-1"):
        with pytest.raises(ValueError, match="NODE:INDEX"):
            parse_gpu_ref(bad)
