"""SimulatedHardware: a scriptable fault injector, health monitor and GPU reset for simulated
inventories (and, as an injector, for admins on real ones: `gpu-platform debug inject`).

Script, one command per line (or `;`-separated); GPU lines take `node NAME` (default: the
inventory's first node) and `at T` (seconds from now; default now):

    xid N on gpu I                       an XID event
    ecc corrected|uncorrected N on gpu I add N to the GPU's volatile ECC counter, report totals
    remap pending|failed on gpu I        the row remapper has a pending remap / a failure
    temp C on gpu I                      the GPU's temperature is now C °C (thermal policy)
    lost gpu I                           the GPU fell off the bus (every call fails)
    reset-fail on gpu I                  the next reset of that GPU fails
    heartbeat stop|start [node NAME]     the node's heartbeats stop / resume

As a HealthMonitor it sends a heartbeat for every node every `heartbeat_interval_s` seconds
(unless stopped by the script, or `heartbeats=False` when a real monitor speaks for the node)
and delivers scheduled lines on its own thread; lines without `at` are delivered before
`inject` returns. As a GpuReset it clears the GPU's volatile ECC counters and pending remap, and
fails for a lost GPU, a GPU with a failed remap, or one scripted to fail.
"""

from __future__ import annotations

import heapq
import itertools
import re
import threading
import time
from dataclasses import dataclass, field

import structlog

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
from gpu_platform.ports.outbound.health_monitor import HealthSink

__all__ = ["SimulatedHardware", "parse_script", "script_nodes"]

log = structlog.get_logger(__name__)

_TAIL = r"(?:\s+node\s+(?P<node>\S+))?(?:\s+at\s+\+?(?P<at>\d+(?:\.\d+)?)s?)?$"
_PATTERNS = {
    "xid": re.compile(r"xid\s+(?P<n>\d+)\s+on\s+gpu\s+(?P<gpu>\d+)" + _TAIL),
    "ecc": re.compile(
        r"ecc\s+(?P<kind>corrected|uncorrected)\s+(?P<n>\d+)\s+on\s+gpu\s+(?P<gpu>\d+)" + _TAIL
    ),
    "remap": re.compile(r"remap\s+(?P<kind>pending|failed)\s+on\s+gpu\s+(?P<gpu>\d+)" + _TAIL),
    "temp": re.compile(r"temp\s+(?P<n>\d+(?:\.\d+)?)\s+on\s+gpu\s+(?P<gpu>\d+)" + _TAIL),
    "lost": re.compile(r"lost\s+(?:on\s+)?gpu\s+(?P<gpu>\d+)" + _TAIL),
    "reset-fail": re.compile(r"reset-fail\s+on\s+gpu\s+(?P<gpu>\d+)" + _TAIL),
    "heartbeat": re.compile(r"heartbeat\s+(?P<kind>stop|start)" + _TAIL),
}


@dataclass(frozen=True, slots=True)
class ScriptLine:
    """One parsed line: `verb` is a key of the grammar; `delay_s` seconds from injection."""

    verb: str
    node: str
    gpu: int | None
    number: float | None
    kind: str | None
    delay_s: float

    def __str__(self) -> str:
        parts = [self.verb]
        if self.kind:
            parts.append(self.kind)
        if self.number is not None:
            parts.append(f"{self.number:g}")
        if self.gpu is not None:
            parts.append(f"on gpu {self.gpu}")
        parts.append(f"node {self.node}")
        if self.delay_s:
            parts.append(f"at {self.delay_s:g}")
        return " ".join(parts)


def parse_script(script: str, inventory: Inventory) -> list[ScriptLine]:
    """Parse every line or raise ValueError naming the first bad one (unknown node or GPU too)."""
    if not inventory.nodes:
        raise ValueError("the inventory has no nodes")
    default = inventory.nodes[0].name
    gpus = {n.name: {g.index for g in n.gpus} for n in inventory.nodes}
    out = []
    for raw in re.split(r"[;\n]", script):
        text = " ".join(raw.strip().lower().split())
        if not text or text.startswith("#"):
            continue
        verb = text.split()[0]
        pattern = _PATTERNS.get(verb)
        m = pattern.match(text) if pattern else None
        if m is None:
            raise ValueError(f"cannot parse {raw.strip()!r} (see docs/faults.md for the grammar)")
        g = m.groupdict()
        node = g.get("node") or default
        if node not in gpus:
            raise ValueError(f"{raw.strip()!r}: no node {node!r}")
        gpu = int(g["gpu"]) if g.get("gpu") is not None else None
        if gpu is not None and gpu not in gpus[node]:
            raise ValueError(f"{raw.strip()!r}: node {node} has no GPU {gpu}")
        number = float(g["n"]) if g.get("n") is not None else None
        at = float(g["at"]) if g.get("at") else 0.0
        out.append(ScriptLine(verb, node, gpu, number, g.get("kind"), at))
    if not out:
        raise ValueError("empty script")
    return out


_NODE = re.compile(r"\snode\s+(?P<node>\S+)")


def script_nodes(script: str, default: str) -> dict[str, list[str]]:
    """The script's lines grouped by the node they name (`default` for lines naming none), in
    order; node names as `parse_script` reads them (lower case). Nothing else is checked: the
    simulator that runs a node's lines parses them fully."""
    out: dict[str, list[str]] = {}
    for raw in re.split(r"[;\n]", script):
        text = " ".join(raw.strip().lower().split())
        if not text or text.startswith("#"):
            continue
        m = _NODE.search(text)
        out.setdefault(m.group("node") if m else default, []).append(raw.strip())
    return out


@dataclass
class _GpuSim:
    corrected: int = 0
    uncorrected: int = 0
    remap_pending: bool = False
    remap_failed: bool = False
    lost: bool = False
    fail_next_reset: bool = False


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    line: ScriptLine = field(compare=False)


class SimulatedHardware:
    """Implements HealthMonitor, FaultInjector and GpuReset over a simulated inventory."""

    def __init__(
        self,
        inventory: Inventory,
        *,
        heartbeat_interval_s: float = 2.0,
        heartbeats: bool = True,
    ) -> None:
        self._inventory = inventory
        self._interval = heartbeat_interval_s
        self._heartbeats = heartbeats
        self._gpus = {(n.name, g.index): _GpuSim() for n in inventory.nodes for g in n.gpus}
        self._silent: set[str] = set()
        self._due: list[_Due] = []
        self._seq = itertools.count()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._sink: HealthSink | None = None
        self._thread: threading.Thread | None = None

    # -- HealthMonitor ---------------------------------------------------------------------

    def start(self, sink: HealthSink) -> None:
        self._sink = sink
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sim-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        next_beat = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                ready = []
                while self._due and self._due[0].at <= now:
                    ready.append(heapq.heappop(self._due).line)
            for line in ready:
                self._deliver(line)
            if self._heartbeats and now >= next_beat:
                for node in self._inventory.nodes:
                    if node.name not in self._silent:
                        self._emit(Heartbeat(node.name))
                next_beat = now + self._interval
            with self._lock:
                wait = next_beat - now if self._heartbeats else 3600.0
                if self._due:
                    wait = min(wait, self._due[0].at - now)
            self._wake.wait(max(0.0, wait))
            self._wake.clear()

    def _emit(self, event: HealthEvent) -> None:
        sink = self._sink
        if sink is None:
            return
        try:
            sink(event)
        except Exception:  # the monitor outlives a failing sink
            log.exception("health sink failed", finding=repr(event))

    # -- FaultInjector -----------------------------------------------------------------------

    def inject(self, script: str) -> list[str]:
        lines = parse_script(script, self._inventory)
        if self._sink is None:
            raise ValueError("the simulated hardware is not started; nothing would hear the faults")
        now = time.monotonic()
        for line in lines:
            if line.delay_s == 0:
                self._deliver(line)
            else:
                with self._lock:
                    heapq.heappush(self._due, _Due(now + line.delay_s, next(self._seq), line))
                self._wake.set()
        return [str(line) for line in lines]

    def _deliver(self, line: ScriptLine) -> None:
        log.warning("injected fault", line=str(line))
        node, gpu = line.node, line.gpu
        event: HealthEvent | None = None
        with self._lock:
            sim = self._gpus[(node, gpu)] if gpu is not None else None
            match line.verb:
                case "xid":
                    assert gpu is not None and line.number is not None
                    event = XidReport(node, gpu, int(line.number))
                case "ecc" | "remap":
                    assert sim is not None and gpu is not None
                    if line.kind == "corrected":
                        sim.corrected += int(line.number or 0)
                    elif line.kind == "uncorrected":
                        sim.uncorrected += int(line.number or 0)
                    elif line.kind == "pending":
                        sim.remap_pending = True
                    else:
                        sim.remap_failed = True
                    event = EccReading(
                        node,
                        gpu,
                        sim.corrected,
                        sim.uncorrected,
                        sim.remap_pending,
                        sim.remap_failed,
                    )
                case "temp":
                    assert gpu is not None and line.number is not None
                    event = ThermalReading(node, gpu, line.number)
                case "lost":
                    assert sim is not None and gpu is not None
                    sim.lost = True
                    event = GpuLostReport(node, gpu, "GPU has fallen off the bus (simulated)")
                case "reset-fail":
                    assert sim is not None
                    sim.fail_next_reset = True
                case "heartbeat":
                    if line.kind == "stop":
                        self._silent.add(node)
                    else:
                        self._silent.discard(node)
        if event is not None:
            self._emit(event)

    # -- GpuReset ------------------------------------------------------------------------------

    def reset(self, node: str, gpu_index: int) -> None:
        with self._lock:
            sim = self._gpus.get((node, gpu_index))
            if sim is None:
                raise GpuResetError(f"no simulated GPU {node}:{gpu_index}")
            if sim.fail_next_reset:
                sim.fail_next_reset = False
                raise GpuResetError("simulated reset failure")
            if sim.lost:
                raise GpuResetError("GPU is lost; it needs a power cycle")
            if sim.remap_failed:
                raise GpuResetError("row remapping failed; the GPU needs replacing")
            sim.corrected = sim.uncorrected = 0
            sim.remap_pending = False
