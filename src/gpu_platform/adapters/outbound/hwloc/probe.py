"""hwloc adapters: a TopologyProbe and a FabricDiscovery over `lstopo --of xml` or an XML file.

Debian's `hwloc-nox` provides `lstopo-no-graphics` (and `lstopo`). Its 2.9 build has no
NVML/RSMI plugins, so on a GPU node it sees GPUs as PCI functions only; NVLink comes from the
vendor adapter (see `adapters.outbound.discovery.detect`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from gpu_platform.adapters.outbound.hwloc.xml_parser import parse_hwloc_xml
from gpu_platform.domain.model.topology import HostTopology, NodeFabric
from gpu_platform.ports.outbound.topology_probe import TopologyError

__all__ = ["LSTOPO_NAMES", "HwlocFabricDiscovery", "HwlocTopologyProbe", "find_lstopo"]

LSTOPO_NAMES = ("lstopo-no-graphics", "lstopo")
_TIMEOUT_S = 60


def find_lstopo() -> str | None:
    for name in LSTOPO_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class HwlocTopologyProbe:
    """Implements TopologyProbe from an hwloc XML file, or from running lstopo on this host."""

    name = "hwloc"

    def __init__(
        self,
        xml_path: str | Path | None = None,
        *,
        node: str = "",
        lstopo: str | None = None,
        labels: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._xml = Path(xml_path) if xml_path is not None else None
        self._node = node
        self._lstopo = lstopo
        self._labels = labels

    def probe(self) -> HostTopology:
        if self._xml is not None:
            try:
                data = self._xml.read_bytes()
            except OSError as exc:
                raise TopologyError(f"{self._xml}: {exc.strerror or exc}") from exc
            topo = parse_hwloc_xml(data, str(self._xml), self._node, fallback_node=self._xml.stem)
        else:
            topo = parse_hwloc_xml(self._run_lstopo(), "lstopo --of xml", self._node)
        if self._labels:
            topo = _with_labels(topo, self._labels)
        return topo

    def _run_lstopo(self) -> bytes:
        tool = self._lstopo or find_lstopo()
        if tool is None:
            raise TopologyError("lstopo not found: install Debian package hwloc-nox")
        try:
            done = subprocess.run(
                [tool, "--of", "xml"], capture_output=True, timeout=_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TopologyError(f"{tool} --of xml failed: {exc}") from exc
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip()
            raise TopologyError(f"{tool} --of xml exited {done.returncode}: {err}")
        return done.stdout


def _with_labels(topo: HostTopology, labels: tuple[tuple[str, str], ...]) -> HostTopology:
    from dataclasses import replace

    return replace(topo, labels=tuple(sorted((dict(topo.labels) | dict(labels)).items())))


class HwlocFabricDiscovery:
    """Implements FabricDiscovery from the NICs hwloc reports (OpenFabrics and Network OS
    devices under PCI functions) plus configured labels."""

    name = "hwloc"

    def __init__(self, probe: HwlocTopologyProbe) -> None:
        self._probe = probe

    def fabric(self) -> NodeFabric:
        topo = self._probe.probe()
        return NodeFabric(topo.node, topo.nics, topo.labels, source=topo.source)
