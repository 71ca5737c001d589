"""detect(): auto-detection order, explicit choices, fallbacks with reasons, plugins."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpu_platform.adapters.outbound.amdsmi import AmdSmiGpuDiscovery
from gpu_platform.adapters.outbound.discovery import JoinedDiscovery, detect, plugin_names
from gpu_platform.adapters.outbound.levelzero import LevelZeroGpuDiscovery
from gpu_platform.adapters.outbound.nvml import NvmlGpuDiscovery
from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery, profile_topology
from gpu_platform.adapters.outbound.sysfs import SysfsTopologyProbe
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError
from gpu_platform.testing.fake_amdsmi import FakeAmdSmi
from gpu_platform.testing.fake_pynvml import FakePynvml
from gpu_platform.testing.fake_pyzes import FakePyzes
from gpu_platform.testing.fake_sysfs import two_socket_gpu_host
from gpu_platform.testing.system import require_shared

MIXED = profile_topology("mixed-vendor")


def vendors(nvml: bool = False, amd: bool = False, intel: bool = False, root: Path | None = None):
    host = SysfsTopologyProbe(root).probe() if root else MIXED
    return {
        "nvml": lambda: NvmlGpuDiscovery(FakePynvml(host, library_present=nvml), node="h"),
        "amdsmi": lambda: AmdSmiGpuDiscovery(FakeAmdSmi(MIXED, driver_loaded=amd), node="h"),
        "levelzero": lambda: LevelZeroGpuDiscovery(FakePyzes(MIXED, initialises=intel), node="h"),
    }


def test_auto_prefers_nvml_and_joins_it_with_sysfs_locality(tmp_path: Path) -> None:
    two_socket_gpu_host(tmp_path)
    d = detect("auto", vendors=vendors(nvml=True, amd=True, root=tmp_path), sysfs_root=tmp_path)
    assert isinstance(d, JoinedDiscovery) and d.name == "nvml"
    inv = d.discover()
    assert inv.source == "nvml+sysfs"
    assert inv.notes[0] == "auto: nvml found 4 GPU(s)"
    (node,) = inv.nodes
    assert node.numa_nodes and node.topology is not None
    assert [g.numa_node for g in node.gpus] == [0, 0, 1, 1]
    assert node.topology.nics  # NICs come from the locality view
    assert len(node.topology.measured_levels) == 6  # levels come from NVML


def test_auto_falls_through_to_amdsmi_then_level_zero_saying_why() -> None:
    d = detect("auto", vendors=vendors(amd=True))
    assert d.name == "amdsmi"
    assert d.discover().notes[0].startswith("auto: amdsmi found 2 GPU(s) after nvml: absent")
    d = detect("auto", vendors=vendors(intel=True))
    assert d.name == "levelzero"


def test_auto_without_any_gpu_library_uses_the_simulated_profile_loudly() -> None:
    d = detect("auto", vendors=vendors(), sim_profile="dgx-h100")
    assert isinstance(d, ProfileGpuDiscovery)
    inv = d.discover()
    assert inv.simulated and inv.source == "sim:dgx-h100"
    reason = inv.notes[1]
    assert reason.startswith("auto: no GPU found (nvml: absent")
    assert "amdsmi: absent" in reason and "levelzero: absent" in reason
    assert reason.endswith("using simulated profile dgx-h100")


def test_auto_with_an_inventory_file_falls_back_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text("nodes:\n  - {name: x, gpus: 2}\n")
    inv = detect("auto", vendors=vendors(), inventory_file=path).discover()
    assert inv.simulated and inv.gpu_count == 2
    assert inv.notes[0].startswith("auto: no GPU found") and str(path) in inv.notes[0]


def test_explicit_choices_are_honoured() -> None:
    assert detect("sim", sim_profile="hgx-8x-pcie").discover().gpu_count == 8
    assert detect("nvml", vendors=vendors()).discover().gpu_count == 0  # absent, not raised
    xml = require_shared("topologies", "hwloc", "nvidiaDGX2.xml")
    inv = detect("hwloc", hwloc_xml=xml).discover()
    assert (inv.gpu_count, inv.simulated) == (16, True)


def test_unknown_names_are_refused_with_the_known_ones() -> None:
    with pytest.raises(
        DiscoveryError, match=r"unknown discovery adapter 'cuda' \(known: auto, nvml"
    ):
        detect("cuda")
    with pytest.raises(DiscoveryError, match="inventory file"):
        detect("file")


PLUGIN = """\
from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery


class AcmeDiscovery(ProfileGpuDiscovery):
    name = "acme"

    def __init__(self, node=None, labels=None):
        super().__init__("mixed-vendor", node or "acme-0", reason="acme plugin", labels=labels)


def broken(**options):
    return object()
"""


@pytest.fixture
def plugin_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "acme_gpu.py").write_text(PLUGIN)
    info = tmp_path / "acme_gpu-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-gpu\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [gpu_platform.adapters]
            acme = acme_gpu:AcmeDiscovery
            broken = acme_gpu:broken
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "acme_gpu", raising=False)


@pytest.mark.usefixtures("plugin_dist")
def test_a_plugin_from_the_entry_point_group_is_chosen_by_name() -> None:
    assert {"acme", "broken"} <= set(plugin_names())
    d: Any = detect("acme", labels={"rack": "r9"})
    inv = d.discover()
    assert d.name == "acme" and inv.nodes[0].name == "acme-0"
    assert inv.nodes[0].labels == (("rack", "r9"),)


@pytest.mark.usefixtures("plugin_dist")
def test_a_plugin_that_returns_no_discovery_is_refused_by_name() -> None:
    with pytest.raises(
        DiscoveryError, match=r"plugin 'broken' \(acme_gpu:broken\) returned object"
    ):
        detect("broken")
